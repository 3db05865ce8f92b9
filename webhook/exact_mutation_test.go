package webhook

// Adversarial objects for the comparisons of the exactness check that no other test holds it to. Each test
// names the comparison it keeps: `make mutate-exactness` (scripts/mutate-exactness) removes or weakens
// each comparison in turn and requires some test to fail.

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
)

// otherUID is the UID of some other Job: as long as testJobUID, so that it fits the same bytes.
const otherUID = "0f6b8a4e-1c2d-4e5f-8a9b-ffffffffffff"

// rawJob is the good Job of tool k8s_get_pod_status as the API server sends it (compact JSON).
func (f *fixture) rawJob(t *testing.T) string {
	t.Helper()
	return string(f.raw(t, f.job(t, "k8s_get_pod_status", podParams(), "")))
}

// checkRaw decides on raw as CheckJobRaw does for a CREATE.
func (f *fixture) checkRaw(t *testing.T, raw string) (*Decision, error) {
	t.Helper()
	return f.c.CheckJobRaw(context.Background(), Request{Operation: "CREATE"}, []byte(raw), nil)
}

// replaceAll replaces old by new in s, where old must occur n times (n < 0: at least once).
func replaceAll(t *testing.T, s, old, new string, n int) string {
	t.Helper()
	if c := strings.Count(s, old); c == 0 || (n >= 0 && c != n) {
		t.Fatalf("%q occurs %d times, want %d", old, c, n)
	}
	return strings.ReplaceAll(s, old, new)
}

// TestUIDCannotSmuggleMembers: the selector and the template's labels are expected to hold the Job's UID as
// a value. A UID whose raw bytes would close a JSON string (the UID comes from the object's own metadata)
// must not smuggle members into them: here the selector and the template's labels gain app=web, which the
// comparison sees and refuses, with a cold and with a warm cache. (A byte-level fast path once admitted it.)
func TestUIDCannotSmuggleMembers(t *testing.T) {
	f := newFixture(t)
	good := f.rawJob(t)
	if d, err := f.checkRaw(t, good); err != nil {
		t.Fatalf("good Job: %+v %v", d, err)
	}
	uid := `x","app":"web`
	q, _ := json.Marshal(uid)
	bad := replaceAll(t, good, `"uid":"`+testJobUID+`"`, `"uid":`+string(q), 1)
	bad = replaceAll(t, bad, `"`+testJobUID+`"`, `"`+uid+`"`, 3)
	o, err := decodeObject([]byte(bad))
	if err != nil {
		t.Fatal(err)
	}
	if o.uid() != uid {
		t.Fatalf("uid %q", o.uid())
	}
	if _, err := f.c.CheckJob(context.Background(), Request{Operation: "CREATE"}, o, nil); err == nil {
		t.Fatal("the slow path admitted a Job whose selector carries app=web")
	}
	if d, err := f.checkRaw(t, bad); err == nil {
		t.Fatalf("admitted a Job whose selector and template labels carry app=web through its UID: %+v", d)
	}
}

// TestJobWithoutUIDIsRefused: the expected selector and controller labels are derived from the Job's UID.
// Without one they would be derived from "", and a Job whose selector and labels say controller-uid=""
// would match them. (The API server sets the UID before validating admission: no real Job lacks one.)
func TestJobWithoutUIDIsRefused(t *testing.T) {
	f := newFixture(t)
	raw := replaceAll(t, f.rawJob(t), `"uid":"`+testJobUID+`",`, ``, 1)
	raw = replaceAll(t, raw, `"`+testJobUID+`"`, `""`, 3)
	o, err := decodeObject([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.CheckJob(context.Background(), Request{Operation: "CREATE"}, o, nil); ruleOf(err) != "exact-metadata" {
		t.Errorf("slow path: %v, want exact-metadata", err)
	}
	if d, err := f.checkRaw(t, raw); err == nil {
		t.Errorf("a Job without a UID was admitted: %+v", d)
	}
}

// at returns the map at path (map keys and list indexes) in v, failing the test when there is none.
func at(t *testing.T, v any, path ...any) map[string]any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k >= len(l) {
				t.Fatalf("no item %d at %v", k, path)
			}
			v = l[k]
		}
	}
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("no object at %v", path)
	}
	return m
}

// TestExactJobRefuses changes the good Job, as the API server hands it over, in one place each: the
// exactness check alone (CompareWithRendering, so that no CEL rule refuses it first) must refuse it, and so
// must the whole decision.
func TestExactJobRefuses(t *testing.T) {
	f := newFixture(t)
	ns := f.p.Spec.Sandbox.Namespace
	tmplLabels := func(o map[string]any) map[string]any { return at(t, o, "spec", "template", "metadata", "labels") }
	tool := func(o map[string]any) map[string]any { return at(t, o, "spec", "template", "spec", "containers", 0) }
	toolSC := func(o map[string]any) map[string]any { return at(t, tool(o), "securityContext") }
	for _, tc := range []struct {
		name string
		edit func(o map[string]any)
	}{
		// What the API server adds: derived from this Job's UID and name, not taken from the object.
		{"template controller-uid of another Job", func(o map[string]any) { tmplLabels(o)[labelControllerUID] = otherUID }},
		{"template job-name of another Job", func(o map[string]any) { tmplLabels(o)[labelJobName] = "as-other" }},
		{"template legacy controller-uid of another Job", func(o map[string]any) { tmplLabels(o)[labelLegacyControllerUID] = otherUID }},
		{"template legacy job-name of another Job", func(o map[string]any) { tmplLabels(o)[labelLegacyJobName] = "as-other" }},
		{"a status on a new Job", func(o map[string]any) { o["status"] = map[string]any{"active": int64(1)} }},
		{"deletionTimestamp on a new Job", func(o map[string]any) { at(t, o, "metadata")["deletionTimestamp"] = "2026-11-30T12:00:00Z" }},
		// A rendered field left out is not the rendering, whatever the API server would default it to.
		{"no ttlSecondsAfterFinished: never cleaned up", func(o map[string]any) { delete(at(t, o, "spec"), "ttlSecondsAfterFinished") }},
		{"no backoffLimit (0): the API server defaults 6 retries", func(o map[string]any) { delete(at(t, o, "spec"), "backoffLimit") }},
		{"no automountServiceAccountToken (false): the token is mounted", func(o map[string]any) {
			delete(at(t, o, "spec", "template", "spec"), "automountServiceAccountToken")
		}},
		{"tool's drop list missing: capabilities kept", func(o map[string]any) { toolSC(o)["capabilities"] = map[string]any{} }},
		{"tool's capabilities missing", func(o map[string]any) { delete(toolSC(o), "capabilities") }},
		// null for a rendered value is not the value.
		{"tool's securityContext null", func(o map[string]any) { tool(o)["securityContext"] = nil }},
		{"tool's command null: the image's entrypoint runs", func(o map[string]any) { tool(o)["command"] = nil }},
		{"activeDeadlineSeconds null: no deadline", func(o map[string]any) { at(t, o, "spec")["activeDeadlineSeconds"] = nil }},
		// Lists and strings compare whole.
		{"tool's command without its last argument", func(o map[string]any) {
			c := tool(o)["command"].([]any)
			tool(o)["command"] = c[:len(c)-1]
		}},
		{"image with a longer tag", func(o map[string]any) { tool(o)["image"] = tool(o)["image"].(string) + "-evil" }},
		// 0 is a value: group root.
		{"tool runs as group 0", func(o map[string]any) { toolSC(o)["runAsGroup"] = int64(0) }},
	} {
		// The edits fail the test (not the subtest) when the Job lacks what they change: run them here.
		o := obj(t, asServer(t, f.job(t, "k8s_get_pod_status", podParams(), "")))
		tc.edit(o)
		raw, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(tc.name, func(t *testing.T) {
			err := CompareWithRendering(f.p, raw, ns)
			if err == nil {
				t.Error("the exactness check admitted it")
			}
			t.Log(err)
			if _, err := f.c.CheckJob(context.Background(), Request{Operation: "CREATE"}, o, nil); err == nil {
				t.Error("CheckJob admitted it")
			}
			if d, err := f.checkRaw(t, string(raw)); err == nil {
				t.Errorf("CheckJobRaw admitted it: %+v", d)
			}
		})
	}
}

// TestRawEditsAreRefused changes the good Job's bytes so that its spec still matches the cached
// rendering but something else differs (its top level, metadata, name, labels, request ID or UID): neither
// entry point may admit it.
func TestRawEditsAreRefused(t *testing.T) {
	f := newFixture(t)
	good := f.rawJob(t)
	if d, err := f.checkRaw(t, good); err != nil {
		t.Fatalf("good Job: %+v %v", d, err)
	}
	name := sandbox.JobName("k8s_get_pod_status", testRequestID)
	meta := `"metadata":{"name":"` + name + `","namespace":"` + f.p.Spec.Sandbox.Namespace + `"`
	first := func(s, old, new string) string {
		if !strings.Contains(s, old) {
			t.Fatalf("%q not in the Job", old)
		}
		return strings.Replace(s, old, new, 1)
	}
	for _, tc := range []struct {
		name string
		edit func(s string) string
	}{
		{"apiVersion batch/v2", func(s string) string {
			return replaceAll(t, s, `"apiVersion":"batch/v1"`, `"apiVersion":"batch/v2"`, 1)
		}},
		{"kind CronJob", func(s string) string { return replaceAll(t, s, `"kind":"Job"`, `"kind":"CronJob"`, 1) }},
		{"a status", func(s string) string { return replaceAll(t, s, `"status":{}`, `"status":{"active":1}`, 1) }},
		{"metadata that is not ObjectMeta", func(s string) string { return first(s, `"metadata":{`, `"metadata":{"finalizers":"x",`) }},
		{"an unknown metadata field", func(s string) string {
			return first(s, `"metadata":{`, `"metadata":{"futureField":{"enabled":true},`)
		}},
		{"generateName", func(s string) string { return first(s, `"metadata":{`, `"metadata":{"generateName":"as-",`) }},
		{"deletionTimestamp", func(s string) string {
			return first(s, `"metadata":{`, `"metadata":{"deletionTimestamp":"2026-11-30T12:00:00Z",`)
		}},
		{"deletionGracePeriodSeconds", func(s string) string {
			return first(s, `"metadata":{`, `"metadata":{"deletionGracePeriodSeconds":30,`)
		}},
		// The top level has a Job's members and nothing else, not even after the closing brace.
		{"an unknown top-level member", func(s string) string {
			return first(s, `"metadata":{`, `"future":{"enabled":true},"metadata":{`)
		}},
		{"bytes after the Job", func(s string) string { return s + `{}` }},
		{"metadata.name alone changed", func(s string) string {
			return replaceAll(t, s, meta, strings.Replace(meta, name, name[:len(name)-1]+"x", 1), 1)
		}},
		{"metadata.namespace changed", func(s string) string {
			return replaceAll(t, s, meta, strings.Replace(meta, `"namespace":"`+f.p.Spec.Sandbox.Namespace, `"namespace":"default`, 1), 1)
		}},
		{"an extra label on the Job", func(s string) string { return first(s, `"labels":{`, `"labels":{"app":"web",`) }},
		// Capitals give the same Job name (the name is lower case), but a request ID has none.
		{"request ID in capitals", func(s string) string {
			return replaceAll(t, s, testRequestID, testRequestID[:4]+strings.ToUpper(testRequestID[4:]), -1)
		}},
		{"selector and labels of another Job (a UID of the same length)", func(s string) string {
			s = replaceAll(t, s, testJobUID, otherUID, 4)
			return replaceAll(t, s, `"uid":"`+otherUID+`"`, `"uid":"`+testJobUID+`"`, 1)
		}},
	} {
		raw := tc.edit(good) // here, not in the subtest: the edits fail the test
		if raw == good {
			t.Fatalf("%s: the edit changed nothing", tc.name)
		}
		t.Run(tc.name, func(t *testing.T) {
			d, err := f.checkRaw(t, raw)
			if err == nil {
				t.Errorf("admitted: %+v", d)
			}
			t.Log(err)
			if o, err := decodeObject([]byte(raw)); err == nil {
				if _, err := f.c.CheckJob(context.Background(), Request{Operation: "CREATE"}, o, nil); err == nil {
					t.Error("the slow path admitted it")
				}
			}
		})
	}
}

// TestTokenOnAReadToolIsRefused: a Job of a tool that takes no approval, rendered whole with a token (so its
// name, annotations and spec agree with one another), is refused on the raw path too.
func TestTokenOnAReadToolIsRefused(t *testing.T) {
	f := newFixture(t)
	raw := string(f.raw(t, f.job(t, "k8s_get_pod_status", podParams(), "x.y.z")))
	if d, err := f.checkRaw(t, raw); ruleOf(err) != "exact-metadata" {
		t.Fatalf("decision %+v, err %v; want exact-metadata", d, err)
	}
}

// TestCachedRenderingChecksTheApproval: a Job that is exactly its rendering still needs a valid, unused token.
func TestCachedRenderingChecksTheApproval(t *testing.T) {
	f := newFixture(t)
	forged := forge(t, f.token(t, f.key, "terraform_apply", applyParams(), nil))
	if _, err := f.checkRaw(t, string(f.raw(t, f.job(t, "terraform_apply", applyParams(), forged)))); ruleOf(err) != "approval" {
		t.Errorf("forged token: %v", err)
	}
	good := string(f.raw(t, f.job(t, "terraform_apply", applyParams(), f.token(t, f.key, "terraform_apply", applyParams(), nil))))
	if d, err := f.checkRaw(t, good); err != nil || len(d.ApprovalTokenIDs) != 1 {
		t.Fatalf("good token: %+v %v", d, err)
	}
	if _, err := f.checkRaw(t, good); !strings.Contains(fmtErr(err), "already used") {
		t.Errorf("replayed token: %v", err)
	}
}

// policyWithRule is the shipped policy with one more admission rule, first.
func policyWithRule(t *testing.T, name, expression string) *policy.Compiled {
	t.Helper()
	data, err := os.ReadFile(shippedPolicy)
	if err != nil {
		t.Fatal(err)
	}
	const anchor = "\n  admissionRules:\n"
	rule := "  - name: " + name + "\n    expression: \"" + expression + "\"\n    message: a rule of a test\n"
	if strings.Count(string(data), anchor) != 1 {
		t.Fatalf("%s: no single %q", shippedPolicy, anchor)
	}
	p, err := policy.Load([]byte(strings.Replace(string(data), anchor, anchor+rule, 1)))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestVerdictNotReusedWhenRulesReadTheObject: a rule that reads a per-Job field (here the UID) gives a
// verdict for each Job, so the verdict cache may not reuse one: the Job it refuses is refused.
func TestVerdictNotReusedWhenRulesReadTheObject(t *testing.T) {
	f := newFixture(t)
	p := policyWithRule(t, "not-this-uid", "object.metadata.?uid.orValue('') != '"+testJobUID+"'")
	if p.Rules.ReadsOnlyRenderedFields() {
		t.Fatal("the rule reads metadata.uid, but the analysis says it reads only rendered fields")
	}
	f.p = p
	f.c.SetPolicy(p)
	// Another Job of the same rendering, with another UID, passes the rule first.
	other := replaceAll(t, f.rawJob(t), testJobUID, otherUID, -1)
	if d, err := f.checkRaw(t, other); err != nil {
		t.Fatalf("the Job with another UID: decision %+v, err %v", d, err)
	}
	if d, err := f.checkRaw(t, f.rawJob(t)); ruleOf(err) != "not-this-uid" {
		t.Fatalf("decision %+v, err %v; want not-this-uid", d, err)
	}
}

// denyRenderings is a rule every rendering fails that reads only rendered fields: its verdict is cached.
const denyRenderings = "podSpec.restartPolicy != 'Never'"

// TestCachedVerdictIsReturned: a rendering the rules refuse is refused, the first time and from the
// verdict cache.
func TestCachedVerdictIsReturned(t *testing.T) {
	f := newFixture(t)
	p := policyWithRule(t, "deny-renderings", denyRenderings)
	if !p.Rules.ReadsOnlyRenderedFields() {
		t.Fatal("the rule reads only the pod spec, but the analysis says otherwise")
	}
	f.p = p
	f.c.SetPolicy(p)
	for i := range 2 {
		if d, err := f.checkRaw(t, f.rawJob(t)); ruleOf(err) != "deny-renderings" {
			t.Fatalf("call %d: decision %+v, err %v; want deny-renderings", i+1, d, err)
		}
	}
}

// TestRenderingCacheIsPerPolicy: an expectation cached under one policy is not reused under the next one.
func TestRenderingCacheIsPerPolicy(t *testing.T) {
	f := newFixture(t)
	raw := f.rawJob(t)
	if d, err := f.checkRaw(t, raw); err != nil {
		t.Fatalf("good Job under the shipped policy: %+v %v", d, err)
	}
	f.c.SetPolicy(policyWithRule(t, "deny-renderings", denyRenderings))
	if d, err := f.checkRaw(t, raw); ruleOf(err) != "deny-renderings" {
		t.Fatalf("after the policy changed: decision %+v, err %v; want deny-renderings", d, err)
	}
}

// TestExactPodRefuses changes the Pod that the Job controller creates for the good Job in one place each:
// exactPod must refuse it, and so must CheckPod. (Some owner reference fields are also checked by CheckPod
// before exactPod, when it finds the owner; exactPod must refuse them on its own all the same.)
func TestExactPodRefuses(t *testing.T) {
	f := newFixture(t)
	j := asServer(t, f.job(t, "k8s_get_pod_status", podParams(), ""))
	f.c.Cluster = &fakeCluster{jobs: []*batchv1.Job{j}}
	inv, err := invocation(f.p, j.Labels, j.Annotations)
	if err != nil {
		t.Fatal(err)
	}
	want, err := expectedJob(f.p, inv, j.Labels[contract.LabelRequestID], "", testHead)
	if err != nil {
		t.Fatal(err)
	}
	if err := exactPod(obj(t, podOf(t, j)), want, j); err != nil {
		t.Fatalf("the good Pod: %v", err)
	}
	toleration := func(m map[string]any) func(o map[string]any) {
		return func(o map[string]any) {
			s := at(t, o, "spec")
			s["tolerations"] = append(s["tolerations"].([]any), m)
		}
	}
	notReady := func(change map[string]any) map[string]any {
		m := map[string]any{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": int64(300)}
		for k, v := range change {
			m[k] = v
		}
		return m
	}
	ref := func(p *corev1.Pod) *metav1.OwnerReference { return &p.OwnerReferences[0] }
	for _, tc := range []struct {
		name string
		pod  func(p *corev1.Pod)
		obj  func(o map[string]any)
	}{
		{"name not after its Job", func(p *corev1.Pod) { p.Name = "as-other-x7k2p" }, nil},
		{"generateName of another Job", func(p *corev1.Pod) { p.GenerateName = "as-other-" }, nil},
		{"another namespace", func(p *corev1.Pod) { p.Namespace = "default" }, nil},
		{"controller-uid of another Job", func(p *corev1.Pod) { p.Labels[labelControllerUID] = otherUID }, nil},
		{"job-name of another Job", func(p *corev1.Pod) { p.Labels[labelJobName] = "as-other" }, nil},
		{"legacy controller-uid of another Job", func(p *corev1.Pod) { p.Labels[labelLegacyControllerUID] = otherUID }, nil},
		{"legacy job-name of another Job", func(p *corev1.Pod) { p.Labels[labelLegacyJobName] = "as-other" }, nil},
		{"owner of another API version", func(p *corev1.Pod) { ref(p).APIVersion = "batch/v2" }, nil},
		{"owner of another kind", func(p *corev1.Pod) { ref(p).Kind = "CronJob" }, nil},
		{"owner of another name", func(p *corev1.Pod) { ref(p).Name = "as-other" }, nil},
		{"owner of another UID", func(p *corev1.Pod) { ref(p).UID = otherUID }, nil},
		{"owner not the controller", func(p *corev1.Pod) { ref(p).Controller = ptr.To(false) }, nil},
		{"owner deletion not blocked", func(p *corev1.Pod) { ref(p).BlockOwnerDeletion = ptr.To(false) }, nil},
		{"another finalizer", func(p *corev1.Pod) { p.Finalizers = append(p.Finalizers, "example.com/hold") }, nil},
		{"a priority without a class", func(p *corev1.Pod) { p.Spec.Priority = ptr.To(int32(1000000)) }, nil},
		{"preemption policy Never", func(p *corev1.Pod) { p.Spec.PreemptionPolicy = ptr.To(corev1.PreemptNever) }, nil},
		// Tolerations beyond the rendering: only the DefaultTolerationSeconds plugin's two.
		{"toleration of another key", nil, toleration(notReady(map[string]any{"key": "example.com/any"}))},
		{"toleration with operator Equal", nil, toleration(notReady(map[string]any{"operator": "Equal"}))},
		{"toleration of NoSchedule", nil, toleration(notReady(map[string]any{"effect": "NoSchedule"}))},
		{"toleration with another field", nil, toleration(notReady(map[string]any{"futureField": true}))},
		{"toleration for ever", nil, toleration(notReady(map[string]any{"tolerationSeconds": nil}))},
	} {
		p := podOf(t, j) // here, not in the subtest: the edits fail the test
		if tc.pod != nil {
			tc.pod(p)
		}
		o := obj(t, p)
		if tc.obj != nil {
			tc.obj(o)
		}
		t.Run(tc.name, func(t *testing.T) {
			err := exactPod(o, want, j)
			if err == nil {
				t.Error("exactPod admitted it")
			}
			t.Log(err)
			req := Request{Operation: "CREATE", User: DefaultJobControllerUsers[0], Namespace: j.Namespace, DryRun: true}
			if _, err := f.c.CheckPod(context.Background(), req, o, nil); err == nil {
				t.Error("CheckPod admitted it")
			}
		})
	}
}

// TestMarkersInParametersAreRendered: a parameter value is the caller's, limited only by the policy's
// pattern. A byte-level fast path once cut its cached spec at markers ("\x01name\x01") where per-Job
// values went, and a parameter holding a marker let the caller place the Job's name in the command where
// the rendering (and the approval, and the audit) says "\x01name\x01". The comparison must refuse that Job,
// and admit the rendering itself, marker and all.
func TestMarkersInParametersAreRendered(t *testing.T) {
	f := newFixture(t)
	data, err := os.ReadFile(shippedPolicy)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	doc = replaceAll(t, doc, `"--selector={{label_selector}}"`, `"{{label_selector}}"`, 1)
	doc = replaceAll(t, doc, `pattern: '[A-Za-z0-9]([A-Za-z0-9._/=!, ()-]*[A-Za-z0-9)])?'`, `pattern: '.+'`, 1)
	p, err := policy.Load([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	f.p = p
	f.c.SetPolicy(p)
	params := map[string]any{"namespace": "demo-app", "label_selector": "\x01name\x01"}
	raw := string(f.raw(t, f.job(t, "k8s_get_pod_status", params, "")))
	name := sandbox.JobName("k8s_get_pod_status", testRequestID)
	bad := replaceAll(t, raw, `"\u0001name\u0001"`, `"`+name+`"`, 1)
	o, err := decodeObject([]byte(bad))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.CheckJob(context.Background(), Request{Operation: "CREATE"}, o, nil); ruleOf(err) != "exact-command" {
		t.Errorf("slow path: %v, want exact-command", err)
	}
	if d, err := f.checkRaw(t, bad); err == nil {
		t.Errorf("admitted a Job whose command differs from its parameters: %+v", d)
	}
	// The rendering itself, marker and all, is still admitted (on the slow path).
	if _, err := f.checkRaw(t, raw); err != nil {
		t.Errorf("the rendering: %v", err)
	}
}
