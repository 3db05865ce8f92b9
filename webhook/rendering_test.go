package webhook

// Tests of the one admission path's caches (rendering.go): a cached rendering or verdict never changes a
// decision, a policy reload drops them, and the cache is bounded and safe for concurrent decisions.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	batchv1 "k8s.io/api/batch/v1"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
)

// raw is j as the API server sends it to the validating webhook (compact JSON).
func (f *fixture) raw(t testing.TB, j *batchv1.Job) []byte {
	t.Helper()
	b, err := json.Marshal(asServer(t, j))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// otherRequestID and otherHead are another call's: a rendering cached for the fixture's request is put to
// use for them by forRequest.
const otherRequestID = "req-9876543210fe"

var otherHead = strings.Repeat("c3", 32)

// jobFor renders the Job the MCP server would create for tool and params in the call requestID, with the
// audit head head, injected as the webhook would.
func (f *fixture) jobFor(t testing.TB, tool string, params map[string]any, token, requestID, head string) *batchv1.Job {
	t.Helper()
	j, inv := f.render(t, tool, params, token, requestID, head)
	Inject(&j.Spec.Template.ObjectMeta, &j.Spec.Template.Spec, f.p, inv)
	return j
}

// verdictCached reports whether the rules' verdict on tool's rendering for params is cached.
func (f *fixture) verdictCached(t testing.TB, tool string, params map[string]any, token string) bool {
	t.Helper()
	raw, err := json.Marshal(params)
	if err != nil {
		t.Fatal(err)
	}
	r, ok := f.c.renderings.get(f.c.Policy(), renderKey{tool: tool, params: string(raw), tokens: token})
	return ok && r.verdict.Load() != nil
}

// outcome is a decision as the API server sees it, without the cache's own bookkeeping.
func outcome(d *Decision, err error) string {
	if err != nil {
		return "denied: " + err.Error()
	}
	return fmt.Sprintf("allowed: tool %s, warnings %q, tokens %q", d.Tool, d.Warnings, d.ApprovalTokenIDs)
}

// TestRenderingIsCached: the second Job of one rendering (another request, another audit head) is decided
// with the cached rendering and admitted, for each tool.
func TestRenderingIsCached(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		tool   string
		params map[string]any
		token  bool
	}{
		{"k8s_get_pod_status", podParams(), false},
		{"terraform_plan", map[string]any{"workspace": "k8s-demo", "source": "tfws-0123456789abcdef0123"}, false},
		{"terraform_apply", applyParams(), true},
	} {
		tok := ""
		if tc.token {
			tok = f.token(t, f.key, tc.tool, tc.params, nil)
		}
		// A dry run consumes no approval, so the same token serves twice.
		req := Request{Operation: "CREATE", DryRun: true}
		d, err := f.c.CheckJobRaw(context.Background(), req, f.raw(t, f.job(t, tc.tool, tc.params, tok)), nil)
		if err != nil || d.Cached {
			t.Fatalf("%s, first Job: decision %+v, err %v; want admitted, rendered afresh", tc.tool, d, err)
		}
		d, err = f.c.CheckJobRaw(context.Background(), req, f.raw(t, f.jobFor(t, tc.tool, tc.params, tok, otherRequestID, otherHead)), nil)
		if err != nil || !d.Cached {
			t.Fatalf("%s, second Job: decision %+v, err %v; want admitted from the cache", tc.tool, d, err)
		}
		// The rules read only rendered fields, and the Job as the API server sends it agrees with the
		// rendering in all of them, value and type: their verdict is cached too.
		if !f.verdictCached(t, tc.tool, tc.params, tok) {
			t.Errorf("%s: the rules' verdict on the rendering is not cached", tc.tool)
		}
	}
	// Another call's parameters are another rendering: rendered afresh, and admitted.
	selector := map[string]any{"namespace": "demo-app", "label_selector": "app=web"}
	d, err := f.c.CheckJobRaw(context.Background(), Request{Operation: "CREATE", DryRun: true}, f.raw(t, f.job(t, "k8s_get_pod_status", selector, "")), nil)
	if err != nil || d.Cached {
		t.Fatalf("a Job with other parameters: decision %+v, err %v; want admitted, rendered afresh", d, err)
	}
}

// decisionCase is one Job to decide with a cold and with a warm cache.
type decisionCase struct {
	name string
	job  func(t *testing.T, f *fixture) *batchv1.Job
}

// decisionCases are every violation of TestCheckJobViolations, the good Jobs of other calls, and Jobs that
// differ from their rendering only where forRequest puts the request's values.
func decisionCases() []decisionCase {
	var out []decisionCase
	for _, v := range violations() {
		out = append(out, decisionCase{"violation " + v.name, func(t *testing.T, f *fixture) *batchv1.Job { return v.job(t, f) }})
	}
	selector := map[string]any{"namespace": "demo-app", "label_selector": "app=web"}
	perRequest := func(name string, edit func(j *batchv1.Job)) decisionCase {
		return decisionCase{name, func(t *testing.T, f *fixture) *batchv1.Job {
			j := f.job(t, "k8s_get_pod_status", podParams(), "")
			edit(j)
			return j
		}}
	}
	return append(out,
		decisionCase{"the good Job", func(t *testing.T, f *fixture) *batchv1.Job { return f.job(t, "k8s_get_pod_status", podParams(), "") }},
		decisionCase{"another call's parameters", func(t *testing.T, f *fixture) *batchv1.Job {
			return f.job(t, "k8s_get_pod_status", selector, "")
		}},
		decisionCase{"another call's parameters, this call's command", func(t *testing.T, f *fixture) *batchv1.Job {
			j := f.job(t, "k8s_get_pod_status", selector, "")
			j.Spec.Template.Spec.Containers[0].Command = f.job(t, "k8s_get_pod_status", podParams(), "").Spec.Template.Spec.Containers[0].Command
			return j
		}},
		decisionCase{"another tool", func(t *testing.T, f *fixture) *batchv1.Job {
			return f.job(t, "terraform_plan", map[string]any{"workspace": "k8s-demo", "source": "tfws-0123456789abcdef0123"}, "")
		}},
		perRequest("the template's request ID of another call", func(j *batchv1.Job) { j.Spec.Template.Labels[contract.LabelRequestID] = otherRequestID }),
		perRequest("the name of another call", func(j *batchv1.Job) { j.Name = sandbox.JobName("k8s_get_pod_status", otherRequestID) }),
		perRequest("the request ID of another call on the Job only", func(j *batchv1.Job) { j.Labels[contract.LabelRequestID] = otherRequestID }),
		perRequest("the audit head on the pod template", func(j *batchv1.Job) { j.Spec.Template.Annotations[contract.AnnotationAuditHead] = testHead }),
		perRequest("another audit head", func(j *batchv1.Job) { j.Annotations[contract.AnnotationAuditHead] = otherHead }),
		perRequest("no audit head", func(j *batchv1.Job) { delete(j.Annotations, contract.AnnotationAuditHead) }),
		perRequest("a request ID that is not one", func(j *batchv1.Job) {
			j.Labels[contract.LabelRequestID], j.Spec.Template.Labels[contract.LabelRequestID] = "req-x", "req-x"
		}),
	)
}

// TestCacheNeverChangesADecision decides every case with a cold cache, then with a cache warmed by other
// calls' Jobs of the same renderings (other request IDs and audit heads), twice (the second time the
// rendering and the verdict come from the cache): the three decisions — admitted or refused, the rule and
// the whole message — must be the same.
func TestCacheNeverChangesADecision(t *testing.T) {
	warm := newFixture(t)
	// Dry runs: the decisions record nothing, so that each sees the same ledgers.
	req := Request{Operation: "CREATE", DryRun: true}
	for _, w := range []*batchv1.Job{
		warm.jobFor(t, "k8s_get_pod_status", podParams(), "", otherRequestID, otherHead),
		warm.jobFor(t, "k8s_get_pod_status", map[string]any{"namespace": "demo-app", "label_selector": "app=web"}, "", otherRequestID, otherHead),
		warm.jobFor(t, "terraform_plan", map[string]any{"workspace": "k8s-demo", "source": "tfws-0123456789abcdef0123"}, "", otherRequestID, otherHead),
	} {
		if _, err := warm.c.CheckJobRaw(context.Background(), req, warm.raw(t, w), nil); err != nil {
			t.Fatalf("warming the cache with %s: %v", w.Name, err)
		}
	}
	cold := newFixture(t)
	for _, tc := range decisionCases() {
		t.Run(tc.name, func(t *testing.T) {
			cold.c.SetPolicy(cold.p) // empties its cache
			coldOut := outcome(cold.c.CheckJobRaw(context.Background(), req, cold.raw(t, tc.job(t, cold)), nil))
			for i := range 2 {
				d, err := warm.c.CheckJobRaw(context.Background(), req, warm.raw(t, tc.job(t, warm)), nil)
				if got := outcome(d, err); got != coldOut {
					t.Fatalf("warm decision %d differs from the cold one:\n warm: %s\n cold: %s", i+1, got, coldOut)
				}
			}
			t.Log(coldOut)
		})
	}
}

// TestPolicyReloadDropsRenderings: a rendering cached under one policy is not used under the next: the Job
// the old policy renders is refused (its deadline is no longer the policy's), the new rendering admitted, and
// a rendering made under the old policy by a decision that began before the reload is not kept.
func TestPolicyReloadDropsRenderings(t *testing.T) {
	f := newFixture(t)
	old := f.p
	req := Request{Operation: "CREATE", DryRun: true}
	oldJob := f.raw(t, f.job(t, "k8s_get_pod_status", podParams(), ""))
	if _, err := f.c.CheckJobRaw(context.Background(), req, oldJob, nil); err != nil {
		t.Fatal(err)
	}
	if n := f.c.renderings.len(); n != 1 {
		t.Fatalf("%d renderings cached, want 1", n)
	}
	data, err := os.ReadFile(shippedPolicy)
	if err != nil {
		t.Fatal(err)
	}
	doc := replaceAll(t, string(data), "      maxLength: 256\n    deadline: 2m\n", "      maxLength: 256\n    deadline: 3m\n", 1)
	p, err := policy.Load([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	f.c.SetPolicy(p)
	if n := f.c.renderings.len(); n != 0 {
		t.Fatalf("%d renderings survived the reload", n)
	}
	if _, err := f.c.CheckJobRaw(context.Background(), req, oldJob, nil); ruleOf(err) != "job-shape" {
		t.Fatalf("the old policy's Job after the reload: %v, want job-shape (its deadline)", err)
	}
	f.p = p
	if _, err := f.c.CheckJobRaw(context.Background(), req, f.raw(t, f.jobFor(t, "k8s_get_pod_status", podParams(), "", otherRequestID, otherHead)), nil); err != nil {
		t.Fatalf("the new policy's Job: %v", err)
	}
	key := renderKey{tool: "k8s_get_pod_status", params: `{"namespace":"demo-app"}`}
	stale, _, err := newRendering(old, mustInvoke(t, old, "k8s_get_pod_status", podParams()), testRequestID, "", testHead)
	if err != nil {
		t.Fatal(err)
	}
	f.c.renderings.put(old, key, stale)
	if r, ok := f.c.renderings.get(p, key); ok && r == stale {
		t.Fatal("a rendering of the old policy was put in the new policy's cache")
	}
	if _, ok := f.c.renderings.get(old, key); ok {
		t.Fatal("the cache serves the old policy after the reload")
	}
}

// mustInvoke is tool's invocation with params under p.
func mustInvoke(t testing.TB, p *policy.Compiled, tool string, params map[string]any) *policy.Invocation {
	t.Helper()
	tl, err := p.Tool(tool)
	if err != nil {
		t.Fatal(err)
	}
	inv, err := tl.Invoke(params)
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

// TestRenderingCacheIsBounded: however many distinct calls there are, the cache keeps at most maxRenderings.
func TestRenderingCacheIsBounded(t *testing.T) {
	f := newFixture(t)
	r, _, err := newRendering(f.p, mustInvoke(t, f.p, "k8s_get_pod_status", podParams()), testRequestID, "", testHead)
	if err != nil {
		t.Fatal(err)
	}
	for i := range maxRenderings + 10 {
		f.c.renderings.put(f.p, renderKey{tool: "k8s_get_pod_status", params: fmt.Sprint(i)}, r)
	}
	if n := f.c.renderings.len(); n != maxRenderings {
		t.Fatalf("%d renderings cached, want the bound %d", n, maxRenderings)
	}
}

// TestForRequestIsTheRendering: the cached rendering put to use for another request is exactly what
// rendering for that request gives, and the cached tree is left as it was.
func TestForRequestIsTheRendering(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		tool   string
		params map[string]any
		token  string
	}{
		{"k8s_get_pod_status", podParams(), ""},
		{"terraform_apply", applyParams(), f.token(t, f.key, "terraform_apply", applyParams(), nil)},
	} {
		inv := mustInvoke(t, f.p, tc.tool, tc.params)
		r, cacheable, err := newRendering(f.p, inv, testRequestID, tc.token, testHead)
		if err != nil || !cacheable {
			t.Fatalf("%s: cacheable %v, err %v", tc.tool, cacheable, err)
		}
		before, _ := json.Marshal(r.tree)
		want, err := renderTree(f.p, inv, otherRequestID, tc.token, otherHead)
		if err != nil {
			t.Fatal(err)
		}
		if m := diff("", r.forRequest(otherRequestID, otherHead), want); m != nil {
			t.Errorf("%s: forRequest differs from the rendering: %s", tc.tool, m)
		}
		if after, _ := json.Marshal(r.tree); string(after) != string(before) {
			t.Errorf("%s: forRequest modified the cached tree", tc.tool)
		}
	}
}

// TestConcurrentDecisionsShareTheCache decides good and bad Jobs of many calls at once while the policy is
// reloaded: every good Job is admitted and every bad one refused for its rule. (Run with -race.)
func TestConcurrentDecisionsShareTheCache(t *testing.T) {
	f := newFixture(t)
	good := func(i int) []byte {
		id := fmt.Sprintf("req-%012d", i)
		return f.raw(t, f.jobFor(t, "k8s_get_pod_status", map[string]any{"namespace": "demo-app", "label_selector": fmt.Sprintf("app=w%d", i%3)}, "", id, testHead))
	}
	badJob := f.job(t, "k8s_get_pod_status", podParams(), "")
	badJob.Spec.Template.Spec.Containers[0].Image = "evil/kubectl:1"
	bad := f.raw(t, badJob)
	jobs := make([][]byte, 24)
	for i := range jobs {
		jobs[i] = good(i)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8*len(jobs))
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i, j := range jobs {
				req := Request{Operation: "CREATE", DryRun: true}
				if _, err := f.c.CheckJobRaw(context.Background(), req, j, nil); err != nil {
					errs <- fmt.Sprintf("worker %d, good Job %d: %v", w, i, err)
				}
				if _, err := f.c.CheckJobRaw(context.Background(), req, bad, nil); ruleOf(err) != "exact-image" {
					errs <- fmt.Sprintf("worker %d, bad Job: %v", w, err)
				}
				if w == 0 && i%8 == 0 {
					f.c.SetPolicy(f.p)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// TestVerdictReusedOnlyForTheSameFields: the rules' verdict on a rendering is reused only for a Job that
// agrees with it exactly in what they read. Each Job here differs from the rendering only where the
// comparison sees no difference, or later than the rules: a rule that reads the difference must refuse
// it with a warm cache as it does with a cold one.
func TestVerdictReusedOnlyForTheSameFields(t *testing.T) {
	for _, tc := range []struct {
		name, rule string
		edit       func(s string) string
	}{
		{"an annotation on the pod template", "podMetadata.annotations.?extra.orValue('') != 'yes'", func(s string) string {
			return strings.Replace(s, `"annotations":{"`+contract.AnnotationInjected, `"annotations":{"extra":"yes","`+contract.AnnotationInjected, 1)
		}},
		{"a deadline of another type", "type(object.spec.activeDeadlineSeconds) == int", func(s string) string {
			return strings.Replace(s, `"activeDeadlineSeconds":120`, `"activeDeadlineSeconds":120.0`, 1)
		}},
		{"an empty list where the rendering has none", "podSpec.containers.all(c, !has(c.envFrom))", func(s string) string {
			return strings.Replace(s, `"name":"`+contract.ToolContainer+`"`, `"name":"`+contract.ToolContainer+`","envFrom":[]`, 1)
		}},
		{"a null where the rendering has nothing", "podSpec.containers.all(c, !has(c.envFrom))", func(s string) string {
			return strings.Replace(s, `"name":"`+contract.ToolContainer+`"`, `"name":"`+contract.ToolContainer+`","envFrom":null`, 1)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			p := policyWithRule(t, "reads-it", tc.rule)
			if !p.Rules.ReadsOnlyRenderedFields() {
				t.Fatal("the rule reads only rendered fields, but the analysis says otherwise")
			}
			f.p = p
			f.c.SetPolicy(p)
			req := Request{Operation: "CREATE", DryRun: true}
			good := f.raw(t, f.jobFor(t, "k8s_get_pod_status", podParams(), "", otherRequestID, otherHead))
			if _, err := f.c.CheckJobRaw(context.Background(), req, good, nil); err != nil {
				t.Fatalf("the good Job: %v", err)
			}
			if !f.verdictCached(t, "k8s_get_pod_status", podParams(), "") {
				t.Fatal("the good Job's verdict is not cached, so this test tests nothing")
			}
			raw := f.rawJob(t)
			bad := tc.edit(raw)
			if bad == raw {
				t.Fatal("the edit changed nothing")
			}
			d, err := f.c.CheckJobRaw(context.Background(), req, []byte(bad), nil)
			if !slices.Contains(strings.Split(ruleOf(err), ","), "reads-it") {
				t.Fatalf("with the verdict cached: %v, want a refusal by reads-it", err)
			}
			f.c.SetPolicy(p) // empties the cache
			if cold := outcome(f.c.CheckJobRaw(context.Background(), req, []byte(bad), nil)); outcome(d, err) != cold {
				t.Fatalf("with the verdict cached: %s\nwith an empty cache: %s", outcome(d, err), cold)
			}
		})
	}
}

// TestVerdictOfAStoppedEvaluationIsNotKept: a Job whose request was cancelled is refused because the rules
// could not be evaluated; that verdict is the request's, not the rendering's, so the next Job of the
// rendering is evaluated and admitted.
func TestVerdictOfAStoppedEvaluationIsNotKept(t *testing.T) {
	f := newFixture(t)
	req := Request{Operation: "CREATE", DryRun: true}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := f.c.CheckJobRaw(ctx, req, f.raw(t, f.jobFor(t, "k8s_get_pod_status", podParams(), "", otherRequestID, otherHead)), nil); err == nil {
		t.Fatal("a Job whose rules could not be evaluated was admitted")
	}
	if d, err := f.c.CheckJobRaw(context.Background(), req, []byte(f.rawJob(t)), nil); err != nil || !d.Cached {
		t.Fatalf("the next Job of the rendering: decision %+v, err %v; want admitted with the cached rendering", d, err)
	}
}

// FuzzCacheNeverChangesADecision changes bytes of a good Job's JSON: a checker whose cache holds the
// rendering decides as one whose cache is empty.
func FuzzCacheNeverChangesADecision(f *testing.F) {
	fx := newFixture(f)
	good := fx.raw(f, fx.job(f, "k8s_get_pod_status", podParams(), ""))
	f.Add(good, 0, byte(0))
	f.Add(good, len(good)/2, byte('x'))
	f.Add([]byte(strings.Replace(string(good), `"status":{}`, `"status":{},"extra":1`, 1)), 0, byte(0))
	f.Add([]byte(strings.Replace(string(good), `"activeDeadlineSeconds":120`, `"activeDeadlineSeconds":120.0`, 1)), 0, byte(0))
	req := Request{Operation: "CREATE", DryRun: true}
	if _, err := fx.c.CheckJobRaw(context.Background(), req, fx.raw(f, fx.jobFor(f, "k8s_get_pod_status", podParams(), "", otherRequestID, otherHead)), nil); err != nil {
		f.Fatal(err)
	}
	cold := newFixture(f)
	f.Fuzz(func(t *testing.T, raw []byte, at int, b byte) {
		if len(raw) > 0 && at >= 0 && at < len(raw) && b != 0 {
			raw = append([]byte(nil), raw...)
			raw[at] = b
		}
		cold.c.SetPolicy(cold.p) // empties its cache
		want := outcome(cold.c.CheckJobRaw(context.Background(), req, raw, nil))
		if got := outcome(fx.c.CheckJobRaw(context.Background(), req, raw, nil)); got != want {
			t.Fatalf("with the rendering cached: %s\nwith an empty cache: %s\n%s", got, want, raw)
		}
	})
}
