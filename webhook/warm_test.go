package webhook

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/ledger"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
)

const (
	testPoolUser = "system:serviceaccount:agent-sandbox-system:agent-sandbox-webhook"
	warmTestTool = "k8s_get_pod_status"
)

// memClaimLedger is an in-memory claim ledger for unit tests; the integration tests use ledger.ConfigMapLedger.
type memClaimLedger struct{ memOnce[string] }

func (l *memClaimLedger) RecordClaim(_ context.Context, id string, _ time.Time) error {
	return l.record(id, ledger.ErrClaimReplayed)
}

// warmJob renders a warm Job of tool as the pool controller submits it, injected as the webhook does.
func (f *fixture) warmJob(t testing.TB, tool, suffix string) *batchv1.Job {
	t.Helper()
	tl, err := f.p.Tool(tool)
	if err != nil {
		t.Fatal(err)
	}
	j, err := sandbox.RenderWarmJob(f.p, tl, suffix)
	if err != nil {
		t.Fatal(err)
	}
	InjectWarm(&j.Spec.Template.ObjectMeta, &j.Spec.Template.Spec, f.p, tl, f.c.claimKeys())
	return j
}

// runningPod is a warm Job's Pod as it is once scheduled and running: node name, status.
func runningPod(t testing.TB, j *batchv1.Job, uid string) *corev1.Pod {
	t.Helper()
	p := podOf(t, j)
	p.Name, p.UID = j.Name+"-"+uid[:5], types.UID(uid)
	p.Spec.NodeName = "agent-sandbox-node"
	p.ResourceVersion = "42"
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, QOSClass: corev1.PodQOSGuaranteed,
		ContainerStatuses:     []corev1.ContainerStatus{{Name: contract.ToolContainer, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}},
		InitContainerStatuses: []corev1.ContainerStatus{{Name: contract.CredentialAgentContainer, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}
	return p
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// claimFor renders the claim the MCP server would patch onto a warm Pod for tool+params.
func (f *fixture) claimFor(t testing.TB, tool string, params map[string]any, requestID, token string) string {
	t.Helper()
	inv := mustInvoke(t, f.p, tool, params)
	c, err := sandbox.RenderClaim(inv, requestID, contract.SplitApprovalTokens(token), testHead)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func withClaim(p *corev1.Pod, claim string) *corev1.Pod {
	n := p.DeepCopy()
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Annotations[contract.AnnotationClaim] = claim
	return n
}

func TestWarmJob(t *testing.T) {
	f := newFixture(t)
	f.c.Identities.PoolUsers = []string{testPoolUser}
	pool := Request{Operation: "CREATE", User: testPoolUser}
	good := f.warmJob(t, warmTestTool, "w0123456789a")
	if _, err := f.checkJob(t, good, pool); err != nil {
		t.Fatalf("the warm rendering was refused: %v", err)
	}
	tests := []struct {
		name   string
		req    Request
		mutate func(j *batchv1.Job)
		rule   string
	}{
		{"created by the MCP server", Request{Operation: "CREATE", User: "system:serviceaccount:agent-sandbox:agent-sandbox-mcp"}, nil, "warm-pool"},
		{"created by an edit user", Request{Operation: "CREATE", User: "alice"}, nil, "warm-pool"},
		{"tool argv instead of the warm entry point", pool, func(j *batchv1.Job) {
			j.Spec.Template.Spec.Containers[0].Command = []string{"/agent-sandbox", "run", "pod-status", "--namespace=kube-system"}
		}, "exact-command"},
		{"claim volume dropped", pool, func(j *batchv1.Job) {
			s := &j.Spec.Template.Spec
			s.Volumes = s.Volumes[:len(s.Volumes)-1]
		}, ""},
		{"longer idle deadline", pool, func(j *batchv1.Job) { j.Spec.ActiveDeadlineSeconds = ptr.To(int64(86400)) }, ""},
		{"request ID label", pool, func(j *batchv1.Job) { j.Labels[contract.LabelRequestID] = testRequestID }, ""},
		{"warm label false", pool, func(j *batchv1.Job) { j.Labels[contract.LabelWarm] = "false" }, ""},
		{"name of a call's Job", pool, func(j *batchv1.Job) { j.Name = sandbox.JobNamePrefix(warmTestTool) + "0123456789ab" }, "exact-metadata"},
		{"tool without a pool", pool, func(j *batchv1.Job) { j.Labels[contract.LabelTool] = "terraform_plan" }, "warm-pool"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := good.DeepCopy()
			if tt.mutate != nil {
				tt.mutate(j)
			}
			_, err := f.checkJob(t, j, tt.req)
			if err == nil {
				t.Fatal("admitted")
			}
			if tt.rule != "" && ruleOf(err) != tt.rule {
				t.Fatalf("rule %q (%v), want %q", ruleOf(err), err, tt.rule)
			}
		})
	}
}

// warmFixture is a running warm Pod of an admitted warm Job, ready to be claimed.
type warmFixture struct {
	*fixture
	job    *batchv1.Job
	pod    *corev1.Pod
	claims *memClaimLedger
}

func newWarmFixture(t testing.TB) *warmFixture {
	f := newFixture(t)
	f.c.Identities.PoolUsers = []string{testPoolUser}
	j := asServer(t, f.warmJob(t, warmTestTool, "w0123456789a"))
	f.c.Cluster = &fakeCluster{jobs: []*batchv1.Job{j}}
	f.c.Pods = admittedJobs(t, j)
	w := &warmFixture{fixture: f, job: j, claims: &memClaimLedger{}}
	f.c.Claims = w.claims
	w.pod = runningPod(t, j, "a1b2c3d4-0000-4000-8000-000000000001")
	return w
}

// claim submits the UPDATE old -> n as the API server does: through the claim-signing mutating endpoint
// first, then the validating one.
func (w *warmFixture) claim(t testing.TB, r Request, n, old *corev1.Pod) error {
	t.Helper()
	if r.Operation == "" {
		r.Operation = "UPDATE"
	}
	if r.Namespace == "" {
		r.Namespace = w.job.Namespace
	}
	if r.Resource == "" {
		r.Resource = "pods"
	}
	sig, ok, err := w.c.signClaim(r, obj(t, n), obj(t, old))
	if err != nil {
		t.Fatalf("signing: %v", err)
	}
	if ok {
		n = n.DeepCopy()
		n.Annotations[contract.AnnotationClaimSignature] = sig
	}
	return w.validate(t, r, n, old)
}

// validate submits the UPDATE old -> n to the validating endpoint only, as a request that did not pass
// the mutating one would arrive.
func (w *warmFixture) validate(t testing.TB, r Request, n, old *corev1.Pod) error {
	t.Helper()
	if r.Operation == "" {
		r.Operation = "UPDATE"
	}
	if r.Namespace == "" {
		r.Namespace = w.job.Namespace
	}
	_, err := w.c.CheckPod(context.Background(), r, obj(t, n), obj(t, old))
	return err
}

func TestWarmPodCreate(t *testing.T) {
	w := newWarmFixture(t)
	jc := Request{Operation: "CREATE", User: DefaultJobControllerUsers[0], Namespace: w.job.Namespace}
	if _, err := w.c.CheckPod(context.Background(), jc, obj(t, podOf(t, w.job)), nil); err != nil {
		t.Fatalf("the warm Job's Pod was refused: %v", err)
	}
	if _, err := w.c.CheckPod(context.Background(), jc, obj(t, podOf(t, w.job)), nil); ruleOf(err) != "one-pod-per-job" {
		t.Fatalf("a second Pod of the warm Job: %v", err)
	}
	p := podOf(t, w.job)
	p.Annotations = map[string]string{contract.AnnotationClaim: w.claimFor(t, warmTestTool, podParams(), testRequestID, "")}
	w.pods.seen = nil
	if _, err := w.c.CheckPod(context.Background(), jc, obj(t, p), nil); err == nil {
		t.Fatal("a warm Pod created already claimed was admitted")
	}
}

func TestClaim(t *testing.T) {
	w := newWarmFixture(t)
	good := w.claimFor(t, warmTestTool, podParams(), testRequestID, "")
	mcp := Request{User: "system:serviceaccount:agent-sandbox:agent-sandbox-mcp"}

	if err := w.claim(t, Request{User: mcp.User, DryRun: true}, withClaim(w.pod, good), w.pod); err != nil {
		t.Fatalf("dry-run claim refused: %v", err)
	}
	if len(w.claims.seen) != 0 {
		t.Fatal("a dry-run claim was recorded")
	}
	if err := w.claim(t, mcp, withClaim(w.pod, good), w.pod); err != nil {
		t.Fatalf("the rendered claim was refused: %v", err)
	}
	claimed := withClaim(w.pod, good)

	// A second warm Pod, for the replay.
	j2 := asServer(t, w.warmJob(t, warmTestTool, "w0123456789b"))
	j2.UID = "0f6b8a4e-1c2d-4e5f-8a9b-0c1d2e3f4a5c"
	for _, m := range []map[string]string{j2.Spec.Template.Labels} {
		m[labelControllerUID], m[labelLegacyControllerUID] = string(j2.UID), string(j2.UID)
	}
	j2.Spec.Selector.MatchLabels[labelControllerUID] = string(j2.UID)
	w.c.Cluster.(*fakeCluster).jobs = append(w.c.Cluster.(*fakeCluster).jobs, j2)
	pod2 := runningPod(t, j2, "b1b2c3d4-0000-4000-8000-000000000002")
	if err := w.claim(t, mcp, withClaim(pod2, good), pod2); ruleOf(err) != "claim-replayed" {
		t.Fatalf("a claim replayed onto another warm Pod: rule %q (%v)", ruleOf(err), err)
	}
	if err := w.claim(t, mcp, withClaim(pod2, w.claimFor(t, warmTestTool, podParams(), "req-0123456789ac", "")), pod2); err != nil {
		t.Fatalf("a fresh claim on the second Pod was refused: %v", err)
	}

	other := w.claimFor(t, warmTestTool, podParams(), "req-0123456789ad", "")
	edit := func(mut func(c *sandbox.Claim)) string {
		c, err := sandbox.ParseClaim(other)
		if err != nil {
			t.Fatal(err)
		}
		mut(c)
		return mustJSON(t, c)
	}
	tests := []struct {
		name     string
		old, new func() *corev1.Pod
		rule     string
	}{
		{"argv other than the rendering", nil, func() *corev1.Pod {
			return withClaim(w.pod, edit(func(c *sandbox.Claim) {
				c.Argv = []string{"/bin/sh", "-c", "cat /var/run/agent-sandbox/credentials/kubeconfig"}
			}))
		}, "claim-exact"},
		{"argv with an extra flag", nil, func() *corev1.Pod {
			return withClaim(w.pod, edit(func(c *sandbox.Claim) { c.Argv = append(c.Argv, "--all-namespaces") }))
		}, "claim-exact"},
		{"shell-injected parameter", nil, func() *corev1.Pod {
			return withClaim(w.pod, edit(func(c *sandbox.Claim) { c.Params = []byte(`{"namespace":"demo-app; cat /etc/passwd"}`) }))
		}, "invalid-parameters"},
		{"kube-system", nil, func() *corev1.Pod {
			return withClaim(w.pod, edit(func(c *sandbox.Claim) {
				c.Params, c.Namespace = []byte(`{"namespace":"kube-system"}`), "kube-system"
				c.Argv = []string{"/agent-sandbox", "run", "pod-status", "--namespace=kube-system", "--selector="}
			}))
		}, "namespace-not-allowed"},
		{"namespace field differs from the parameters", nil, func() *corev1.Pod {
			return withClaim(w.pod, edit(func(c *sandbox.Claim) { c.Namespace = "kube-system" }))
		}, "claim-exact"},
		{"another tool than the Pod's", nil, func() *corev1.Pod {
			return withClaim(w.pod, edit(func(c *sandbox.Claim) { c.Tool = "terraform_apply" }))
		}, "claim"},
		{"token on a tool that takes none", nil, func() *corev1.Pod {
			return withClaim(w.pod, edit(func(c *sandbox.Claim) { c.ApprovalToken = "eyJhbGciOiJFZERTQSJ9.e30.sig" }))
		}, "claim"},
		{"request ID not a call's", nil, func() *corev1.Pod {
			return withClaim(w.pod, edit(func(c *sandbox.Claim) { c.RequestID = "x" }))
		}, "claim"},
		{"unknown field", nil, func() *corev1.Pod {
			return withClaim(w.pod, strings.Replace(other, `{`, `{"env":{"A":"b"},`, 1))
		}, "claim"},
		{"not canonical (spaces)", nil, func() *corev1.Pod {
			return withClaim(w.pod, strings.Replace(other, `,`, `, `, 1))
		}, "claim-exact"},
		{"oversized", nil, func() *corev1.Pod {
			return withClaim(w.pod, strings.Replace(other, `"req-`, `"req-`+strings.Repeat("a", sandbox.MaxClaimBytes), 1))
		}, "claim"},
		{"second claim on a claimed Pod", func() *corev1.Pod { return claimed }, func() *corev1.Pod { return withClaim(w.pod, other) }, "immutable"},
		{"claim removed", func() *corev1.Pod { return claimed }, func() *corev1.Pod { return w.pod.DeepCopy() }, "immutable"},
		{"claim plus a label", nil, func() *corev1.Pod {
			p := withClaim(w.pod, other)
			p.Labels["x"] = "y"
			return p
		}, "claim-exact"},
		{"claim plus another annotation", nil, func() *corev1.Pod {
			p := withClaim(w.pod, other)
			p.Annotations["x"] = "y"
			return p
		}, "claim-exact"},
		{"claim plus an image", nil, func() *corev1.Pod {
			p := withClaim(w.pod, other)
			p.Spec.Containers[0].Image = "evil:1"
			return p
		}, "claim-exact"},
		{"claim plus a toleration", nil, func() *corev1.Pod {
			p := withClaim(w.pod, other)
			p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Operator: corev1.TolerationOpExists})
			return p
		}, "claim-exact"},
		{"claim on a cold Pod", func() *corev1.Pod {
			cold := asServer(t, w.fixture.job(t, warmTestTool, podParams(), ""))
			return podOf(t, cold)
		}, nil, "immutable"},
		{"claim on a Pod labelled warm but owned by a call's Job", func() *corev1.Pod {
			cold := asServer(t, w.fixture.job(t, warmTestTool, podParams(), ""))
			p := podOf(t, cold)
			p.Labels[contract.LabelWarm] = "true"
			return p
		}, nil, "claim"},
		{"finished warm Pod", func() *corev1.Pod {
			p := w.pod.DeepCopy()
			p.Status.Phase = corev1.PodSucceeded
			return p
		}, nil, "claim"},
		{"warm Pod being deleted", func() *corev1.Pod {
			p := w.pod.DeepCopy()
			p.DeletionTimestamp = ptr.To(metav1.Now())
			return p
		}, nil, "claim"},
		{"warm Pod the policy no longer renders", func() *corev1.Pod {
			p := w.pod.DeepCopy()
			p.Spec.Containers[0].Image = "localhost/agent-sandbox:old"
			return p
		}, nil, "claim-stale"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w.claims.seen = map[string]bool{}
			old := w.pod
			if tt.old != nil {
				old = tt.old()
			}
			n := withClaim(old, other)
			if tt.new != nil {
				n = tt.new()
			}
			err := w.claim(t, mcp, n, old)
			if err == nil {
				t.Fatal("admitted")
			}
			if tt.rule != "" && ruleOf(err) != tt.rule {
				t.Fatalf("rule %q (%v), want %q", ruleOf(err), err, tt.rule)
			}
			if len(w.claims.seen) != 0 {
				t.Fatal("a refused claim was recorded in the ledger")
			}
		})
	}

	t.Run("owner Job finished", func(t *testing.T) {
		w := newWarmFixture(t)
		w.job.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
		if err := w.claim(t, mcp, withClaim(w.pod, good), w.pod); ruleOf(err) != "owner-job" {
			t.Fatalf("rule %q (%v), want owner-job", ruleOf(err), err)
		}
	})
	t.Run("pool removed from the policy", func(t *testing.T) {
		w := newWarmFixture(t)
		p := withoutPools(t)
		w.c.SetPolicy(p)
		if err := w.claim(t, mcp, withClaim(w.pod, good), w.pod); ruleOf(err) != "warm-pool" {
			t.Fatalf("rule %q (%v), want warm-pool", ruleOf(err), err)
		}
	})
	t.Run("no claim ledger", func(t *testing.T) {
		w := newWarmFixture(t)
		w.c.Claims = nil
		if err := w.claim(t, mcp, withClaim(w.pod, good), w.pod); ruleOf(err) != "claim-ledger" {
			t.Fatalf("rule %q (%v), want claim-ledger", ruleOf(err), err)
		}
	})
}

// withoutPools loads the shipped policy without any warm pool.
func withoutPools(t testing.TB) *policy.Compiled {
	t.Helper()
	raw, err := os.ReadFile(shippedPolicy)
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.Contains(line, "warmPool:") {
			kept = append(kept, line)
		}
	}
	p, err := policy.Load([]byte(strings.Join(kept, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestClaimOnZonedNode: a warm Pod bound to a node with topology labels carries them (the API server's
// PodTopologyLabels plugin copies them through the Binding, Kubernetes 1.35+); it is still the warm
// rendering, and its claim is admitted. A label the binding did not bring is not.
func TestClaimOnZonedNode(t *testing.T) {
	w := newWarmFixture(t)
	mcp := Request{User: "system:serviceaccount:agent-sandbox:agent-sandbox-mcp"}
	zoned := w.pod.DeepCopy()
	zoned.Labels["topology.kubernetes.io/zone"], zoned.Labels["topology.kubernetes.io/region"] = "europe-west1-b", "europe-west1"
	if err := w.claim(t, mcp, withClaim(zoned, w.claimFor(t, warmTestTool, podParams(), testRequestID, "")), zoned); err != nil {
		t.Fatalf("the claim of a warm Pod on a zoned node was refused: %v", err)
	}
	relabelled := w.pod.DeepCopy()
	relabelled.Labels["topology.kubernetes.io/rack"] = "r1"
	if err := w.claim(t, mcp, withClaim(relabelled, w.claimFor(t, warmTestTool, podParams(), "req-0123456789ac", "")), relabelled); ruleOf(err) != "claim-stale" {
		t.Fatalf("a warm Pod with a label no binding brings was claimed: rule %q (%v)", ruleOf(err), err)
	}
}
