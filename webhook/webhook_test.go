package webhook

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
)

const shippedPolicy = "../policy/policy.yaml"

var planID = strings.Repeat("ab", 32)

func loadPolicy(t testing.TB) *policy.Compiled {
	t.Helper()
	p, err := policy.LoadFile(shippedPolicy)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// memLedger is an in-memory approval ledger for unit tests; the integration tests use ConfigMapLedger.
type memLedger struct {
	mu   sync.Mutex
	used map[string]bool
}

func (l *memLedger) Record(_ context.Context, id string, _ time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.used[id] {
		return approval.ErrReplayed
	}
	if l.used == nil {
		l.used = map[string]bool{}
	}
	l.used[id] = true
	return nil
}

type fixture struct {
	p      *policy.Compiled
	c      *Checker
	key    *approval.PrivateKey
	ledger *memLedger
	now    time.Time
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	key, err := approval.GenerateKey("test-approver")
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{p: loadPolicy(t), key: key, ledger: &memLedger{}, now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	f.c = &Checker{Ledger: f.ledger, Now: func() time.Time { return f.now }}
	f.c.SetPolicy(f.p)
	f.c.SetKeys(key.KeySet())
	return f
}

// job renders the Job the MCP server would create for tool and params, then injects as the webhook would.
func (f *fixture) job(t testing.TB, tool string, params map[string]any, token string) *batchv1.Job {
	t.Helper()
	tl, err := f.p.Tool(tool)
	if err != nil {
		t.Fatal(err)
	}
	inv, err := tl.Invoke(params)
	if err != nil {
		t.Fatal(err)
	}
	j, err := sandbox.RenderJob(f.p, sandbox.JobSpec{Invocation: inv, RequestID: "req-0123456789ab", ApprovalToken: token})
	if err != nil {
		t.Fatal(err)
	}
	Inject(&j.Spec.Template.ObjectMeta, &j.Spec.Template.Spec, f.p, inv)
	return j
}

// token signs an approval for tool+params as a human would with `agent-sandbox approve`.
func (f *fixture) token(t testing.TB, key *approval.PrivateKey, tool string, params map[string]any, mut func(*approval.Claims)) string {
	t.Helper()
	tl, _ := f.p.Tool(tool)
	inv, err := tl.Invoke(params)
	if err != nil {
		t.Fatal(err)
	}
	hash, err := approval.ParamsHash(tool, inv.Params)
	if err != nil {
		t.Fatal(err)
	}
	req := &approval.Request{ID: "req-0123456789ab", Tool: tool, ParamsHash: hash, Namespace: inv.TargetNamespace, PlanDigest: inv.PlanDigest}
	claims, err := approval.NewClaims(req, key.KeyID(), f.p.Spec.ClusterID, f.now, 0)
	if err != nil {
		t.Fatal(err)
	}
	if mut != nil {
		mut(&claims)
	}
	tok, err := approval.Sign(key, claims)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func podParams() map[string]any { return map[string]any{"namespace": "demo-app"} }
func applyParams() map[string]any {
	return map[string]any{"workspace": "k8s-demo", "source": "tfws-0123456789abcdef0123", "plan_id": planID}
}

func ruleOf(err error) string {
	var d *Denial
	if errors.As(err, &d) {
		return d.Rule
	}
	return ""
}

func TestCheckJobGood(t *testing.T) {
	f := newFixture(t)
	d, err := f.c.CheckJob(context.Background(), Request{Operation: "CREATE"}, f.job(t, "k8s_get_pod_status", podParams(), ""), nil)
	if err != nil {
		t.Fatalf("good Job denied: %v", err)
	}
	if d.Tool != "k8s_get_pod_status" || len(d.Warnings) != 0 {
		t.Errorf("decision %+v", d)
	}
}

func TestCheckJobViolations(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(j *batchv1.Job)
		rule   string
	}{
		{"runc", func(j *batchv1.Job) { j.Spec.Template.Spec.RuntimeClassName = ptr.To("runc") }, "runtime-class"},
		{"no runtime class", func(j *batchv1.Job) { j.Spec.Template.Spec.RuntimeClassName = nil }, "runtime-class"},
		{"host network", func(j *batchv1.Job) { j.Spec.Template.Spec.HostNetwork = true }, "no-host-namespaces"},
		{"privileged sidecar", func(j *batchv1.Job) {
			j.Spec.Template.Spec.InitContainers[0].SecurityContext.Privileged = ptr.To(true)
		}, "not-privileged"},
		{"wrong image", func(j *batchv1.Job) { j.Spec.Template.Spec.Containers[0].Image = "evil/kubectl:latest" }, "exact-image"},
		{"extra argument", func(j *batchv1.Job) {
			c := &j.Spec.Template.Spec.Containers[0]
			c.Command = append(c.Command, "--all-namespaces")
		}, "exact-command"},
		{"args", func(j *batchv1.Job) { j.Spec.Template.Spec.Containers[0].Args = []string{"x"} }, "exact-command"},
		{"shell-injected parameter", func(j *batchv1.Job) {
			j.Annotations[contract.AnnotationParams] = `{"namespace":"demo-app; rm -rf /"}`
			j.Spec.Template.Annotations[contract.AnnotationParams] = j.Annotations[contract.AnnotationParams]
		}, "invalid-parameters"},
		{"command matches tampered params", func(j *batchv1.Job) {
			j.Annotations[contract.AnnotationParams] = `{"namespace":"kube-system"}`
			j.Spec.Template.Annotations[contract.AnnotationParams] = j.Annotations[contract.AnnotationParams]
			j.Spec.Template.Spec.Containers[0].Command[3] = "--namespace=kube-system"
		}, "namespace-not-allowed"},
		{"wrong service account", func(j *batchv1.Job) { j.Spec.Template.Spec.ServiceAccountName = "default" }, "service-account"},
		{"unknown tool", func(j *batchv1.Job) {
			j.Labels[contract.LabelTool] = "kubectl_exec"
			j.Spec.Template.Labels[contract.LabelTool] = "kubectl_exec"
		}, "unknown-tool"},
		{"no tool label", func(j *batchv1.Job) {
			delete(j.Labels, contract.LabelTool)
			delete(j.Spec.Template.Labels, contract.LabelTool)
		}, "no-tool-label"},
		{"template label differs", func(j *batchv1.Job) { j.Spec.Template.Labels[contract.LabelTool] = "terraform_plan" }, "template-metadata"},
		{"credential in env", func(j *batchv1.Job) {
			c := &j.Spec.Template.Spec.Containers[0]
			c.Env = append(c.Env, corev1.EnvVar{Name: "KUBE_TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "admin"}, Key: "token"}}})
		}, "no-credentials-in-env"},
		{"extra env", func(j *batchv1.Job) {
			c := &j.Spec.Template.Spec.Containers[0]
			c.Env = append(c.Env, corev1.EnvVar{Name: "HTTPS_PROXY", Value: "http://evil:3128"})
		}, "exact-env"},
		{"extra projected token", func(j *batchv1.Job) {
			s := &j.Spec.Template.Spec
			s.Volumes = append(s.Volumes, corev1.Volume{Name: "kube-token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}}})
		}, "service-account-token"},
		{"vault token in tool container", func(j *batchv1.Job) {
			c := &j.Spec.Template.Spec.Containers[0]
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: contract.VaultTokenVolume, MountPath: "/t"})
		}, "vault-token-sidecar-only"},
		{"sidecar removed", func(j *batchv1.Job) { j.Spec.Template.Spec.InitContainers = nil }, "exact-containers"},
		{"sidecar scope tampered", func(j *batchv1.Job) {
			c := &j.Spec.Template.Spec.InitContainers[0]
			for i, a := range c.Command {
				if strings.HasPrefix(a, "--namespace=") {
					c.Command[i] = "--namespace=kube-system"
				}
			}
		}, "exact-command"},
		{"backoff", func(j *batchv1.Job) { j.Spec.BackoffLimit = ptr.To(int32(3)) }, "job-shape"},
		{"parallel", func(j *batchv1.Job) { j.Spec.Parallelism = ptr.To(int32(5)) }, "job-shape"},
		{"deadline", func(j *batchv1.Job) { j.Spec.ActiveDeadlineSeconds = ptr.To(int64(7200)) }, "deadline"},
		{"bigger limits", func(j *batchv1.Job) {
			j.Spec.Template.Spec.Containers[0].Resources = sandbox.Resources(policy.Resources{CPU: j.Spec.Template.Spec.Containers[0].Resources.Limits.Cpu().DeepCopy(), Memory: *resourceMustParse("64Gi")})
		}, "exact-resources"},
		{"hostPath", func(j *batchv1.Job) {
			s := &j.Spec.Template.Spec
			s.Volumes = append(s.Volumes, corev1.Volume{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}})
		}, "no-host-path,allowed-volume-types"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			j := f.job(t, "k8s_get_pod_status", podParams(), "")
			tt.mutate(j)
			_, err := f.c.CheckJob(context.Background(), Request{Operation: "CREATE"}, j, nil)
			if got := ruleOf(err); got != tt.rule {
				t.Fatalf("rule %q (%v), want %q", got, err, tt.rule)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("denial is not one line: %q", err)
			}
		})
	}
}

func TestApproval(t *testing.T) {
	other, _ := approval.GenerateKey("someone-else")
	impostor, _ := approval.GenerateKey("test-approver") // same kid, other key
	tests := []struct {
		name  string
		token func(f *fixture) string
		rule  string
		text  string
	}{
		{"good", func(f *fixture) string { return f.token(t, f.key, "terraform_apply", applyParams(), nil) }, "", ""},
		{"missing", func(*fixture) string { return "" }, "approval-required", "approve"},
		{"forged signature", func(f *fixture) string {
			return forge(t, f.token(t, f.key, "terraform_apply", applyParams(), nil))
		}, "approval", "signature"},
		{"untrusted key", func(f *fixture) string { return f.token(t, other, "terraform_apply", applyParams(), nil) }, "approval", "not a trusted approver"},
		{"impostor with trusted kid", func(f *fixture) string { return f.token(t, impostor, "terraform_apply", applyParams(), nil) }, "approval", "signature"},
		{"expired", func(f *fixture) string {
			return f.token(t, f.key, "terraform_apply", applyParams(), func(c *approval.Claims) {
				c.IssuedAt, c.NotBefore, c.Expiry = f.now.Add(-time.Hour), f.now.Add(-time.Hour), f.now.Add(-30*time.Minute)
			})
		}, "approval", "expired"},
		{"other params", func(f *fixture) string {
			p := applyParams()
			p["plan_id"] = strings.Repeat("cd", 32)
			return f.token(t, f.key, "terraform_apply", p, nil)
		}, "approval", "other parameters"},
		{"other audience", func(f *fixture) string {
			return f.token(t, f.key, "terraform_apply", applyParams(), func(c *approval.Claims) { c.Audience = "prod-cluster" })
		}, "approval", "another cluster"},
		{"other tool", func(f *fixture) string {
			return f.token(t, f.key, "terraform_apply", applyParams(), func(c *approval.Claims) { c.Tool = "terraform_plan" })
		}, "approval", "another tool"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			j := f.job(t, "terraform_apply", applyParams(), tt.token(f))
			_, err := f.c.CheckJob(context.Background(), Request{Operation: "CREATE"}, j, nil)
			if tt.rule == "" {
				if err != nil {
					t.Fatalf("good approval denied: %v", err)
				}
				return
			}
			if got := ruleOf(err); got != tt.rule || !strings.Contains(err.Error(), tt.text) {
				t.Fatalf("got %q (%v), want rule %q saying %q", got, err, tt.rule, tt.text)
			}
		})
	}
}

func TestApprovalSingleUseAndDryRun(t *testing.T) {
	f := newFixture(t)
	tok := f.token(t, f.key, "terraform_apply", applyParams(), nil)
	j := f.job(t, "terraform_apply", applyParams(), tok)
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if _, err := f.c.CheckJob(ctx, Request{Operation: "CREATE", DryRun: true}, j, nil); err != nil {
			t.Fatalf("dry run %d: %v", i, err)
		}
	}
	if _, err := f.c.CheckJob(ctx, Request{Operation: "CREATE"}, j, nil); err != nil {
		t.Fatalf("real create after dry runs: %v", err)
	}
	_, err := f.c.CheckJob(ctx, Request{Operation: "CREATE"}, j, nil)
	if !strings.Contains(fmtErr(err), "already used") {
		t.Fatalf("replay: got %v", err)
	}
}

func TestCheckPod(t *testing.T) {
	f := newFixture(t)
	j := f.job(t, "k8s_get_pod_status", podParams(), "")
	j.UID = "job-uid"
	f.c.Jobs = jobs{j}
	pod := func() *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
			Name: j.Name + "-x", Namespace: "agent-sandbox", Labels: j.Spec.Template.Labels, Annotations: j.Spec.Template.Annotations,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: j.Name, UID: j.UID, Controller: ptr.To(true)}},
		}, Spec: *j.Spec.Template.Spec.DeepCopy()}
	}
	ctx := context.Background()
	jc := Request{Operation: "CREATE", User: DefaultJobControllerUsers[0]}
	if _, err := f.c.CheckPod(ctx, jc, pod(), nil); err != nil {
		t.Fatalf("pod from the job controller denied: %v", err)
	}
	if _, err := f.c.CheckPod(ctx, Request{Operation: "CREATE", User: "alice"}, pod(), nil); ruleOf(err) != "pods-only-from-jobs" {
		t.Fatalf("pod created directly: %v", err)
	}
	forged := pod()
	forged.OwnerReferences[0].UID = "other-uid"
	if _, err := f.c.CheckPod(ctx, jc, forged, nil); ruleOf(err) != "owner-job" {
		t.Fatalf("forged owner: %v", err)
	}
	swapped := pod()
	swapped.Spec.Containers[0].Command = []string{"/bin/sh", "-c", "cat /var/run/agent-sandbox/credentials/kubeconfig"}
	if _, err := f.c.CheckPod(ctx, jc, swapped, nil); ruleOf(err) != "exact-command" {
		t.Fatalf("pod with another command: %v", err)
	}
	old := pod()
	changed := pod()
	changed.Spec.Containers[0].Image = "evil"
	if _, err := f.c.CheckPod(ctx, Request{Operation: "UPDATE"}, changed, old); ruleOf(err) != "immutable" {
		t.Fatalf("spec update: %v", err)
	}
	finalizerOnly := pod()
	finalizerOnly.Finalizers = nil
	if _, err := f.c.CheckPod(ctx, Request{Operation: "UPDATE"}, finalizerOnly, old); err != nil {
		t.Fatalf("metadata-only update denied: %v", err)
	}
}

type jobs []*batchv1.Job

func (js jobs) GetJob(_ context.Context, ns, name string) (*batchv1.Job, error) {
	for _, j := range js {
		if j.Name == name && j.Namespace == ns {
			return j, nil
		}
	}
	return nil, errors.New("not found")
}

func TestInjectIdempotent(t *testing.T) {
	f := newFixture(t)
	j := f.job(t, "terraform_plan", map[string]any{"workspace": "k8s-demo", "source": "tfws-0123456789abcdef0123"}, "")
	before := j.DeepCopy()
	tl, _ := f.p.Tool("terraform_plan")
	inv, _ := tl.Invoke(map[string]any{"workspace": "k8s-demo", "source": "tfws-0123456789abcdef0123"})
	if Inject(&j.Spec.Template.ObjectMeta, &j.Spec.Template.Spec, f.p, inv) {
		t.Fatal("second injection changed the template")
	}
	if !equalJSON(t, before, j) {
		t.Fatal("template changed by a second injection")
	}
}

// TestMutationPatchGolden runs the mutating handler on the Job the MCP server submits and compares the
// JSON patch with testdata/mutation-patch.golden.json. UPDATE_GOLDEN=1 rewrites the file.
func TestMutationPatchGolden(t *testing.T) {
	f := newFixture(t)
	tl, _ := f.p.Tool("k8s_get_pod_status")
	inv, _ := tl.Invoke(map[string]any{"namespace": "demo-app", "label_selector": "app=web"})
	j, err := sandbox.RenderJob(f.p, sandbox.JobSpec{Invocation: inv, RequestID: "req-0123456789ab"})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(j)
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	m, _ := NewMetrics(prometheus.NewRegistry())
	h := Handlers(scheme, f.c, m)[PathMutateJobs].(*admission.Webhook)
	resp := h.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: types.UID("1"), Operation: admissionv1.Create, Namespace: j.Namespace, Name: j.Name,
		Kind: metav1.GroupVersionKind{Group: "batch", Version: "v1", Kind: "Job"}, Object: runtime.RawExtension{Raw: raw}}})
	if !resp.Allowed {
		t.Fatalf("mutation refused: %v", resp.Result)
	}
	// The patch library emits operations in map order; they touch distinct paths, so sort them.
	patches := resp.Patches
	sort.Slice(patches, func(i, j int) bool {
		return patches[i].Path+patches[i].Operation < patches[j].Path+patches[j].Operation
	})
	got, err := json.MarshalIndent(patches, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "mutation-patch.golden.json")
	if os.Getenv("UPDATE_GOLDEN") == "1" {
		if err := os.WriteFile(golden, append(got, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with UPDATE_GOLDEN=1 to create it)", err)
	}
	if strings.TrimSpace(string(want)) != strings.TrimSpace(string(got)) {
		t.Fatalf("mutation patch differs from %s (UPDATE_GOLDEN=1 to accept):\n%s", golden, got)
	}
}

// FuzzAdmissionDecode feeds arbitrary bytes as the object of admission requests to every handler: nothing
// may panic, and nothing undecodable may be allowed.
func FuzzAdmissionDecode(f *testing.F) {
	fx := newFixture(f)
	j := fx.job(f, "k8s_get_pod_status", podParams(), "")
	good, _ := json.Marshal(j)
	f.Add(good, "Job")
	f.Add([]byte(`{"apiVersion":"batch/v1","kind":"Job","metadata":{"labels":{"agent-sandbox.dev/tool":"terraform_apply"}}}`), "Job")
	f.Add([]byte(`{"kind":"Pod","spec":{"containers":[{"name":"tool"}]}}`), "Pod")
	f.Add([]byte(`[]`), "Job")
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	m, _ := NewMetrics(prometheus.NewRegistry())
	hs := Handlers(scheme, fx.c, m)
	f.Fuzz(func(t *testing.T, raw []byte, kind string) {
		path, k := PathValidateJobs, metav1.GroupVersionKind{Group: "batch", Version: "v1", Kind: "Job"}
		if kind == "Pod" {
			path, k = PathValidatePods, metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}
		}
		for _, p := range []string{path, PathMutateJobs} {
			resp := hs[p].(*admission.Webhook).Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
				UID: "1", Operation: admissionv1.Create, Namespace: "agent-sandbox", Kind: k, Object: runtime.RawExtension{Raw: raw},
				UserInfo: userInfo("fuzz")}})
			if p == path && resp.Allowed && !json.Valid(raw) {
				t.Fatalf("undecodable object allowed: %q", raw)
			}
		}
	})
}

// forge flips one bit of the signature, keeping the token well-formed.
func forge(t *testing.T, tok string) string {
	t.Helper()
	i := strings.LastIndex(tok, ".")
	sig, err := base64.RawURLEncoding.DecodeString(tok[i+1:])
	if err != nil {
		t.Fatal(err)
	}
	sig[0] ^= 1
	return tok[:i+1] + base64.RawURLEncoding.EncodeToString(sig)
}

func fmtErr(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func resourceMustParse(s string) *resource.Quantity {
	q := resource.MustParse(s)
	return &q
}

func userInfo(name string) authenticationv1.UserInfo {
	return authenticationv1.UserInfo{Username: name}
}

// BenchmarkCheckJob is the validating decision for one safe Job: CEL rules, exact rendering, no approval.
func BenchmarkCheckJob(b *testing.B) {
	f := newFixture(b)
	j := f.job(b, "k8s_get_pod_status", podParams(), "")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f.c.CheckJob(ctx, Request{Operation: "CREATE"}, j, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "reviews/s")
}

// BenchmarkHandler is one full AdmissionReview through the validating handler: decode, decide, encode.
func BenchmarkHandler(b *testing.B) {
	f := newFixture(b)
	j := f.job(b, "k8s_get_pod_status", podParams(), "")
	raw, _ := json.Marshal(j)
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	m, _ := NewMetrics(prometheus.NewRegistry())
	h := Handlers(scheme, f.c, m)[PathValidateJobs].(*admission.Webhook)
	req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{UID: "1", Operation: admissionv1.Create, Namespace: j.Namespace,
		Kind: metav1.GroupVersionKind{Group: "batch", Version: "v1", Kind: "Job"}, Object: runtime.RawExtension{Raw: raw}}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if resp := h.Handle(ctx, req); !resp.Allowed {
			b.Fatal(resp.Result)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "reviews/s")
}
