package webhook

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
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
	"k8s.io/apimachinery/pkg/util/intstr"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/audit"
	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/ledger"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/test/corpus/cases"
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

// The ledger the webhook runs with (internal/ledger) is each of the ledgers the Checker consumes; it cannot
// say so itself, since it does not import this package.
var (
	_ PodLedger    = (*ledger.ConfigMapLedger)(nil)
	_ ClaimLedger  = (*ledger.ConfigMapLedger)(nil)
	_ AnchorLedger = (*ledger.ConfigMapLedger)(nil)
)

// memOnce records each key once, as the ConfigMap ledgers' create of a named object does: recording a key
// again is the error again. The in-memory ledgers of the unit tests are made of it; the integration tests use
// ledger.ConfigMapLedger.
type memOnce[K comparable] struct {
	mu   sync.Mutex
	seen map[K]bool
}

func (m *memOnce[K]) record(key K, again error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.seen[key] {
		return again
	}
	if m.seen == nil {
		m.seen = map[K]bool{}
	}
	m.seen[key] = true
	return nil
}

// memLedger is an in-memory approval ledger.
type memLedger struct{ memOnce[string] }

func (l *memLedger) Record(_ context.Context, id string, _ time.Time) error {
	return l.record(id, approval.ErrReplayed)
}

func (l *memLedger) Seen(_ context.Context, id string) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seen[id], nil
}

type fixture struct {
	p       *policy.Compiled
	c       *Checker
	key     *approval.PrivateKey
	ledger  *memLedger
	pods    *memPodLedger
	anchors *memAnchorLedger
	now     time.Time
}

// memAnchorLedger is an in-memory anchor ledger for unit tests; the integration tests use ledger.ConfigMapLedger.
type memAnchorLedger struct {
	mu          sync.Mutex
	anchors     map[string]audit.Anchor // by ledger.AnchorName
	expires     map[string]time.Time
	voids       map[string]*audit.Void // by the name of the anchor voided
	voidExpires map[string]time.Time
	err         error // returned by every call when set
}

func (l *memAnchorLedger) RecordAnchor(_ context.Context, a audit.Anchor, expires time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return l.err
	}
	if l.anchors == nil {
		l.anchors, l.expires = map[string]audit.Anchor{}, map[string]time.Time{}
	}
	name := ledger.AnchorName(a.RequestID, a.Job)
	if _, ok := l.anchors[name]; !ok {
		l.anchors[name], l.expires[name] = a, expires
	}
	return nil
}

func (l *memAnchorLedger) ClaimAnchors(_ context.Context, pods []types.UID) ([]ledger.ClaimAnchor, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return nil, l.err
	}
	var out []ledger.ClaimAnchor
	for name, a := range l.anchors {
		if a.PodUID != "" && slices.Contains(pods, types.UID(a.PodUID)) {
			a.Name = name
			a.Void = l.voids[name]
			out = append(out, ledger.ClaimAnchor{Anchor: a, Expires: l.expires[name]})
		}
	}
	return out, nil
}

func (l *memAnchorLedger) RecordVoid(_ context.Context, v audit.Void, expires time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return l.err
	}
	if l.voids == nil {
		l.voids, l.voidExpires = map[string]*audit.Void{}, map[string]time.Time{}
	}
	if _, ok := l.voids[v.Anchor]; !ok {
		l.voids[v.Anchor], l.voidExpires[v.Anchor] = &v, expires
	}
	return nil
}

func (l *memAnchorLedger) all() []audit.Anchor {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []audit.Anchor
	for _, a := range l.anchors {
		out = append(out, a)
	}
	return out
}

// memPodLedger is an in-memory Pod ledger for unit tests; the integration tests use ledger.ConfigMapLedger.
type memPodLedger struct {
	memOnce[types.UID]
	jobs memOnce[types.UID]
}

// admittedJobs is a Pod ledger that holds jobs as admitted by the webhook (recordJob), as the Jobs a test
// makes as the API server would have them (asServer) were, and no Pod yet.
func admittedJobs(t testing.TB, jobs ...*batchv1.Job) *memPodLedger {
	t.Helper()
	l := &memPodLedger{}
	for _, j := range jobs {
		if err := l.RecordJob(context.Background(), j.UID, time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

func (l *memPodLedger) RecordJob(_ context.Context, job types.UID, _ time.Time) error {
	_ = l.jobs.record(job, nil)
	return nil
}

func (l *memPodLedger) JobRecorded(_ context.Context, job types.UID) (bool, error) {
	l.jobs.mu.Lock()
	defer l.jobs.mu.Unlock()
	return l.jobs.seen[job], nil
}

func (l *memPodLedger) RecordPod(_ context.Context, job types.UID, _ time.Time) error {
	return l.record(job, ledger.ErrSecondPod)
}

func (l *memPodLedger) PodRecorded(_ context.Context, job types.UID) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seen[job], nil
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	key, err := approval.GenerateKey("test-approver")
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{p: loadPolicy(t), key: key, ledger: &memLedger{}, pods: &memPodLedger{}, anchors: &memAnchorLedger{},
		now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	f.c = &Checker{Ledger: f.ledger, Pods: f.pods, Anchors: f.anchors, Now: func() time.Time { return f.now }}
	f.c.SetPolicy(f.p)
	f.c.SetKeys(key.KeySet())
	if f.c.ClaimSigner, err = GenerateClaimSigner(); err != nil {
		t.Fatal(err)
	}
	return f
}

const testRequestID = "req-0123456789ab"

// testHead is the audit chain head the fixture's Jobs and claims carry.
var testHead = strings.Repeat("5a", 32)

// job renders the Job the MCP server would create for tool and params, then injects as the webhook would.
func (f *fixture) job(t testing.TB, tool string, params map[string]any, token string) *batchv1.Job {
	t.Helper()
	return f.jobFor(t, tool, params, token, testRequestID, testHead)
}

// rendered is the Job the MCP server would create for tool and params, before the webhook's injection.
func (f *fixture) rendered(t testing.TB, tool string, params map[string]any, token string) *batchv1.Job {
	t.Helper()
	j, _ := f.render(t, tool, params, token, testRequestID, testHead)
	return j
}

// render renders tool's Job for params as the MCP server would for requestID and head, and the invocation.
func (f *fixture) render(t testing.TB, tool string, params map[string]any, token, requestID, head string) (*batchv1.Job, *policy.Invocation) {
	t.Helper()
	inv := mustInvoke(t, f.p, tool, params)
	j, err := sandbox.RenderJob(f.p, sandbox.JobSpec{Invocation: inv, RequestID: requestID, ApprovalTokens: contract.SplitApprovalTokens(token), AuditHead: head})
	if err != nil {
		t.Fatal(err)
	}
	return j, inv
}

const testJobUID = "0f6b8a4e-1c2d-4e5f-8a9b-0c1d2e3f4a5b"

// asServer returns the Job as the API server hands it to a validating webhook: defaulted, with its UID,
// server metadata, generated selector and controller labels.
func asServer(t testing.TB, j *batchv1.Job) *batchv1.Job {
	t.Helper()
	s := j.DeepCopy()
	applyJobDefaults(s)
	s.UID = testJobUID
	s.Generation = 1
	s.ResourceVersion = ""
	s.CreationTimestamp = metav1.NewTime(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	s.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "agent-sandbox", Operation: metav1.ManagedFieldsOperationUpdate}}
	if s.Spec.Selector == nil {
		s.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{labelControllerUID: testJobUID}}
	}
	if s.Spec.ManualSelector == nil {
		s.Spec.ManualSelector = ptr.To(false)
	}
	l := s.Spec.Template.Labels
	l[labelControllerUID], l[labelJobName], l[labelLegacyControllerUID], l[labelLegacyJobName] = testJobUID, s.Name, testJobUID, s.Name
	return s
}

// podOf returns the Pod the Job controller creates for j (as the API server hands it to the webhook).
func podOf(t testing.TB, j *batchv1.Job) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: j.Name + "-x7k2p", GenerateName: j.Name + "-", Namespace: j.Namespace, UID: "a1b2c3d4-0000-4000-8000-000000000001",
			Labels: maps.Clone(j.Spec.Template.Labels), Annotations: maps.Clone(j.Spec.Template.Annotations),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: j.Name, UID: j.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
			Finalizers:      []string{finalizerJobTracking},
		},
		Spec: *j.Spec.Template.Spec.DeepCopy(),
	}
	p.Spec.Priority = ptr.To(int32(0))
	p.Spec.PreemptionPolicy = ptr.To(corev1.PreemptLowerPriority)
	p.Spec.Tolerations = append(p.Spec.Tolerations,
		corev1.Toleration{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To(int64(300))},
		corev1.Toleration{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To(int64(300))})
	p.Status = corev1.PodStatus{Phase: corev1.PodPending, QOSClass: corev1.PodQOSGuaranteed}
	return p
}

// obj is v as the webhook decodes it from an AdmissionReview.
func obj(t testing.TB, v any) object {
	t.Helper()
	o, err := decodeObject([]byte(mustJSON(t, v)))
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func (f *fixture) checkJob(t testing.TB, j *batchv1.Job, r Request) (*Decision, error) {
	t.Helper()
	if r.Operation == "" {
		r.Operation = "CREATE"
	}
	return f.c.CheckJob(context.Background(), r, obj(t, asServer(t, j)), nil)
}

// token signs an approval for tool+params as a human would with `agent-sandbox approve`.
func (f *fixture) token(t testing.TB, key *approval.PrivateKey, tool string, params map[string]any, mut func(*approval.Claims)) string {
	t.Helper()
	inv := mustInvoke(t, f.p, tool, params)
	hash, err := approval.ParamsHash(tool, inv.Params)
	if err != nil {
		t.Fatal(err)
	}
	req := &approval.Request{ID: testRequestID, Tool: tool, ParamsHash: hash, Namespace: inv.TargetNamespace, PlanDigest: inv.PlanDigest}
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
	return map[string]any{"workspace": "k8s-demo", "plan_id": planID}
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
	for _, tc := range []struct {
		tool   string
		params map[string]any
	}{
		{"k8s_get_pod_status", podParams()},
		{"k8s_get_pod_status", map[string]any{"namespace": "demo-app", "label_selector": "app=web"}},
		{"terraform_plan", map[string]any{"workspace": "k8s-demo", "source": "tfws-0123456789abcdef0123"}},
	} {
		d, err := f.checkJob(t, f.job(t, tc.tool, tc.params, ""), Request{})
		if err != nil {
			t.Fatalf("good %s Job denied: %v", tc.tool, err)
		}
		if d.Tool != tc.tool || len(d.Warnings) != 0 {
			t.Errorf("decision %+v", d)
		}
	}
}

// TestCheckJobRecordsTheAdmission: an admitted Job's UID is in the Pod ledger (CheckPod admits a Pod only for
// such a Job); a dry run, and a Job that is refused, record nothing.
func TestCheckJobRecordsTheAdmission(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	recorded := func() bool {
		ok, err := f.pods.JobRecorded(ctx, testJobUID)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if _, err := f.checkJob(t, f.job(t, "k8s_get_pod_status", podParams(), ""), Request{DryRun: true}); err != nil || recorded() {
		t.Fatalf("dry run: %v, recorded %v; want admitted and not recorded", err, recorded())
	}
	bad := f.job(t, "k8s_get_pod_status", podParams(), "")
	bad.Spec.Template.Spec.Containers[0].Image = "registry.invalid/other:1"
	if _, err := f.checkJob(t, bad, Request{}); err == nil || recorded() {
		t.Fatalf("refused Job: %v, recorded %v; want refused and not recorded", err, recorded())
	}
	if _, err := f.checkJob(t, f.job(t, "k8s_get_pod_status", podParams(), ""), Request{}); err != nil || !recorded() {
		t.Fatalf("admitted Job: %v, recorded %v; want admitted and recorded", err, recorded())
	}
}

// violation is a Job the webhook must refuse, naming rule.
type violation struct {
	name string
	rule string
	job  func(t testing.TB, f *fixture) *batchv1.Job
}

// TestCheckJobViolations is "one good Job, one change per violation": every unsafe Job must be refused by
// the rule named, with a one-line reason.
func TestCheckJobViolations(t *testing.T) {
	for _, tt := range violations() {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			_, err := f.checkJob(t, tt.job(t, f), Request{})
			if got := ruleOf(err); got != tt.rule {
				t.Fatalf("rule %q (%v), want %q", got, err, tt.rule)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("denial is not one line: %q", err)
			}
		})
	}
}

// violations are the unsafe Jobs of the adversarial corpus (test/corpus/cases: the integration tests and
// `make verify` submit the same Jobs to a real API server), each made as the API server hands it to the
// validating webhook, and then unitViolations.
func violations() []violation {
	var out []violation
	for _, c := range cases.Jobs() {
		out = append(out, violation{c.Class + "/" + c.Name, c.Rule, func(t testing.TB, f *fixture) *batchv1.Job { return f.caseJob(t, c) }})
	}
	for _, v := range unitViolations() {
		out = append(out, violation{"unit/" + v.name, v.rule, func(t testing.TB, f *fixture) *batchv1.Job {
			j := f.job(t, cases.Tool, podParams(), "")
			v.mutate(j)
			return j
		}})
	}
	return out
}

// caseJob is a Job case of the corpus as the validating webhook receives it: the Job the MCP server
// submits (injected first for a cases.Injected case), changed by the case, then through the mutating
// webhook, as the API server calls it.
func (f *fixture) caseJob(t testing.TB, c cases.Job) *batchv1.Job {
	t.Helper()
	j := f.rendered(t, cases.Tool, cases.PodParams(), "")
	if c.Base == cases.Injected {
		f.mutatingWebhook(t, j)
	}
	c.Mutate(j)
	f.mutatingWebhook(t, j)
	return j
}

// mutatingWebhook runs the mutating webhook's defaulter on a Job's CREATE.
func (f *fixture) mutatingWebhook(t testing.TB, j *batchv1.Job) {
	t.Helper()
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx := admission.NewContextWithRequest(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: admissionv1.Create}})
	if err := (&jobDefaulter{c: f.c, m: m}).Default(ctx, j); err != nil {
		t.Fatal(err)
	}
}

// unitViolation is a change to the injected Job that the corpus cannot hold.
type unitViolation struct {
	name   string
	mutate func(j *batchv1.Job)
	rule   string
}

// unitViolations are Jobs that the API server refuses before any webhook sees them, so that the corpus,
// which submits to a real one, cannot hold them; the webhook must not lean on the API server's validation.
// Each has a twin in the corpus that the API server accepts (the corpus's privileged sidecar also allows
// privilege escalation, its successPolicy is an Indexed Job's, ...). Kubernetes 1.37 says, in turn:
// "cannot set `allowPrivilegeEscalation` to false and `privileged` to true", "requires indexed completion
// mode" (twice), "backoffLimitPerIndex: Required value: when maxFailedIndexes is specified", "`selector`
// not auto-generated".
func unitViolations() []unitViolation {
	sidecar := func(j *batchv1.Job) *corev1.Container { return &j.Spec.Template.Spec.InitContainers[0] }
	return []unitViolation{
		{"privileged sidecar, escalation still off", func(j *batchv1.Job) { sidecar(j).SecurityContext.Privileged = ptr.To(true) }, "not-privileged"},
		{"successPolicy of a NonIndexed Job", func(j *batchv1.Job) {
			j.Spec.SuccessPolicy = &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{{SucceededCount: ptr.To(int32(1))}}}
		}, "job-shape"},
		{"backoffLimitPerIndex of a NonIndexed Job", func(j *batchv1.Job) { j.Spec.BackoffLimitPerIndex = ptr.To(int32(1)) }, "job-shape"},
		{"maxFailedIndexes alone", func(j *batchv1.Job) { j.Spec.MaxFailedIndexes = ptr.To(int32(1)) }, "job-shape"},
		{"own selector without manualSelector", func(j *batchv1.Job) {
			j.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
		}, "job-shape"},
	}
}

// TestCheckJobRefusesUnknownFields adds a field this program's API types do not know — as a newer
// Kubernetes version could — at every level of the Job: each is refused with its path.
func TestCheckJobRefusesUnknownFields(t *testing.T) {
	f := newFixture(t)
	paths := [][]string{
		{"futureField"},
		{"metadata", "futureField"},
		{"spec", "futureJobField"},
		{"spec", "template", "futureField"},
		{"spec", "template", "metadata", "futureField"},
		{"spec", "template", "spec", "futurePodField"},
		{"spec", "template", "spec", "securityContext", "futureField"},
		{"spec", "template", "spec", "containers", "0", "futureContainerField"},
		{"spec", "template", "spec", "containers", "0", "securityContext", "futureField"},
		{"spec", "template", "spec", "initContainers", "0", "futureField"},
		{"spec", "template", "spec", "volumes", "0", "futureVolumeSource"},
		{"spec", "template", "spec", "containers", "0", "resources", "futureField"},
	}
	for _, p := range paths {
		o := obj(t, asServer(t, f.job(t, "k8s_get_pod_status", podParams(), "")))
		var at any = map[string]any(o)
		for _, k := range p[:len(p)-1] {
			switch x := at.(type) {
			case map[string]any:
				at = x[k]
			case []any:
				at = x[0]
			}
		}
		at.(map[string]any)[p[len(p)-1]] = map[string]any{"enabled": true}
		_, err := f.c.CheckJob(context.Background(), Request{Operation: "CREATE"}, o, nil)
		if err == nil || (!strings.Contains(err.Error(), p[len(p)-1]) && ruleOf(err) != "allowed-volume-types") {
			t.Errorf("%s: %v", strings.Join(p, "."), err)
		}
	}
}

// TestCheckJobRefusesEveryUnrenderedField sets, one at a time, every field of the Job, pod and container
// types that the policy does not render to a non-zero value: each must be refused. A field that a new
// version of the API types adds is covered the day the types are updated.
func TestCheckJobRefusesEveryUnrenderedField(t *testing.T) {
	f := newFixture(t)
	base := f.job(t, "k8s_get_pod_status", podParams(), "")
	rendered := obj(t, asServer(t, base))
	targets := []struct {
		name string
		get  func(j *batchv1.Job) reflect.Value
	}{
		{"spec", func(j *batchv1.Job) reflect.Value { return reflect.ValueOf(&j.Spec).Elem() }},
		{"spec.template.spec", func(j *batchv1.Job) reflect.Value { return reflect.ValueOf(&j.Spec.Template.Spec).Elem() }},
		{"spec.template.spec.securityContext", func(j *batchv1.Job) reflect.Value {
			return reflect.ValueOf(j.Spec.Template.Spec.SecurityContext).Elem()
		}},
		{"spec.template.spec.containers[0]", func(j *batchv1.Job) reflect.Value { return reflect.ValueOf(&j.Spec.Template.Spec.Containers[0]).Elem() }},
		{"spec.template.spec.containers[0].securityContext", func(j *batchv1.Job) reflect.Value {
			return reflect.ValueOf(j.Spec.Template.Spec.Containers[0].SecurityContext).Elem()
		}},
		{"spec.template.spec.initContainers[0]", func(j *batchv1.Job) reflect.Value {
			return reflect.ValueOf(&j.Spec.Template.Spec.InitContainers[0]).Elem()
		}},
	}
	tested := 0
	for _, tg := range targets {
		typ := tg.get(base).Type()
		for i := range typ.NumField() {
			field := typ.Field(i)
			if !field.IsExported() {
				continue
			}
			j := base.DeepCopy()
			v := tg.get(j).Field(i)
			if !v.IsZero() {
				// Rendered by the policy: changing it is covered by TestCheckJobViolations.
				continue
			}
			fill(v)
			o := obj(t, asServer(t, j))
			if reflect.DeepEqual(o, rendered) {
				continue // the zero value and our fill serialize the same (e.g. an empty struct)
			}
			tested++
			if _, err := f.c.CheckJob(context.Background(), Request{Operation: "CREATE"}, o, nil); err == nil {
				t.Errorf("%s.%s set to a non-zero value was admitted", tg.name, field.Name)
			}
		}
	}
	t.Logf("%d unrendered fields tried, each refused", tested)
	if tested < 80 {
		t.Fatalf("only %d fields were tried; the reflection walk is broken", tested)
	}
}

// fill sets v to some non-zero value of its type.
func fill(v reflect.Value) {
	switch v.Type() {
	case reflect.TypeOf(resource.Quantity{}):
		v.Set(reflect.ValueOf(resource.MustParse("3")))
		return
	case reflect.TypeOf(metav1.Time{}):
		v.Set(reflect.ValueOf(metav1.NewTime(time.Unix(1, 0))))
		return
	case reflect.TypeOf(intstr.IntOrString{}):
		v.Set(reflect.ValueOf(intstr.FromInt32(7)))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString("x1")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(p.Elem())
		v.Set(p)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0))
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k)
		fill(e)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
				return
			}
		}
	}
}

// TestApproval: an apply Job with a good approval is admitted, and every unsafe approval of the adversarial
// corpus (test/corpus/cases) is refused with its rule and reason, consuming nothing.
func TestApproval(t *testing.T) {
	f := newFixture(t)
	good := f.token(t, f.key, cases.ApplyTool, applyParams(), nil)
	if _, err := f.checkJob(t, f.job(t, cases.ApplyTool, applyParams(), good), Request{}); err != nil {
		t.Fatalf("good approval denied: %v", err)
	}
	for _, a := range cases.Approvals() {
		t.Run(a.Name, func(t *testing.T) {
			f := newFixture(t)
			_, err := f.checkJob(t, f.approvalJob(t, a), Request{})
			if got := ruleOf(err); got != a.Rule || !strings.Contains(err.Error(), a.Says) {
				t.Fatalf("got %q (%v), want rule %q saying %q", got, err, a.Rule, a.Says)
			}
			if len(f.ledger.seen) != 0 {
				t.Fatal("a refused Job consumed its approval")
			}
		})
	}
}

// approvalJob is the Job of an approval case of the corpus as the validating webhook receives it.
func (f *fixture) approvalJob(t testing.TB, a cases.Approval) *batchv1.Job {
	t.Helper()
	token := a.Token(func(k cases.Key, params map[string]any, claims func(*approval.Claims)) string {
		key := f.key
		var err error
		switch k {
		case cases.Untrusted:
			key, err = approval.GenerateKey("someone-else")
		case cases.Impostor:
			key, err = approval.GenerateKey(f.key.KeyID())
		}
		if err != nil {
			t.Fatal(err)
		}
		return f.token(t, key, cases.ApplyTool, params, claims)
	})
	j := f.rendered(t, cases.ApplyTool, applyParams(), token)
	a.Change(j, sandbox.JobName)
	f.mutatingWebhook(t, j)
	return j
}

// TestApprovalPolicyTokenTTL: spec.approval.tokenTTL governs admission. Under a policy that allows 10
// minutes, an approval signed for the default 30 is refused, one signed for 10 is admitted.
func TestApprovalPolicyTokenTTL(t *testing.T) {
	f := newFixture(t)
	short := loadPolicy(t)
	short.Spec.Approval.TokenTTL.Duration = 10 * time.Minute
	f.c.SetPolicy(short)
	long := f.token(t, f.key, "terraform_apply", applyParams(), nil)
	if _, err := f.checkJob(t, f.job(t, "terraform_apply", applyParams(), long), Request{}); !strings.Contains(fmtErr(err), "spec.approval.tokenTTL") {
		t.Fatalf("a 30m approval under a 10m policy: %v", err)
	}
	ok := f.token(t, f.key, "terraform_apply", applyParams(), func(c *approval.Claims) { c.Expiry = c.IssuedAt.Add(10 * time.Minute) })
	if _, err := f.checkJob(t, f.job(t, "terraform_apply", applyParams(), ok), Request{}); err != nil {
		t.Fatalf("a 10m approval under a 10m policy: %v", err)
	}
}

func TestApprovalSingleUseAndDryRun(t *testing.T) {
	f := newFixture(t)
	tok := f.token(t, f.key, "terraform_apply", applyParams(), nil)
	j := f.job(t, "terraform_apply", applyParams(), tok)
	for i := 0; i < 2; i++ {
		if _, err := f.checkJob(t, j, Request{DryRun: true}); err != nil {
			t.Fatalf("dry run %d: %v", i, err)
		}
	}
	if _, err := f.checkJob(t, j, Request{}); err != nil {
		t.Fatalf("real create after dry runs: %v", err)
	}
	_, err := f.checkJob(t, j, Request{})
	if !strings.Contains(fmtErr(err), "already used") {
		t.Fatalf("replay: got %v", err)
	}
}

// TestApprovalJobNameIsBoundToTheToken: the Job that carries a token is named after the token, so no
// other Job can hold that name first and make the approved Job's creation fail after its token was spent.
// A Job under its request's name instead is refused (the corpus's approval cases, TestApproval).
func TestApprovalJobNameIsBoundToTheToken(t *testing.T) {
	f := newFixture(t)
	tok := f.token(t, f.key, "terraform_apply", applyParams(), nil)
	j := f.job(t, "terraform_apply", applyParams(), tok)
	if want := sandbox.ApprovalJobName("terraform_apply", tok); j.Name != want {
		t.Fatalf("rendered name %s, want %s", j.Name, want)
	}
	if j.Name == sandbox.JobName("terraform_apply", testRequestID) {
		t.Fatal("the approval Job is named after its request")
	}
}

// TestCheckJobUpdate: the API server's and the controllers' bookkeeping on an admitted Job is allowed;
// every change of the corpus (test/corpus/cases), applied as the API server applies it, is refused, and so
// is a change while the Job is being deleted (the corpus cannot hold a Job in deletion: a Job with a
// finalizer that would keep it there is not admitted).
func TestCheckJobUpdate(t *testing.T) {
	f := newFixture(t)
	j := asServer(t, f.job(t, "k8s_get_pod_status", podParams(), ""))
	ctx := context.Background()
	upd := Request{Operation: "UPDATE"}
	tests := []struct {
		name   string
		mutate func(j *batchv1.Job)
		ok     bool
	}{
		{"status only", func(j *batchv1.Job) { j.Status.Active = 1; j.ResourceVersion = "9" }, true},
		{"gc finalizer", func(j *batchv1.Job) { j.Finalizers = []string{"foregroundDeletion"} }, true},
		{"being deleted", func(j *batchv1.Job) {
			j.DeletionTimestamp = ptr.To(metav1.Now())
			j.DeletionGracePeriodSeconds = ptr.To(int64(0))
		}, true},
		{"spec change while deleting", func(j *batchv1.Job) {
			j.DeletionTimestamp = ptr.To(metav1.Now())
			j.Spec.Parallelism = ptr.To(int32(3))
		}, false},
	}
	for _, c := range cases.JobChanges() {
		tests = append(tests, struct {
			name   string
			mutate func(j *batchv1.Job)
			ok     bool
		}{"corpus/" + c.Name, func(n *batchv1.Job) { *n = *changed(t, n, c.Patch, c.Body, c.Update) }, false})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := j.DeepCopy()
			tt.mutate(n)
			_, err := f.c.CheckJob(ctx, upd, obj(t, n), obj(t, j))
			if tt.ok && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !tt.ok && ruleOf(err) != cases.Immutable {
				t.Fatalf("want immutable, got %v", err)
			}
		})
	}
}

// changed applies a change of the corpus to an object as the API server would (a fake client's patch or
// update of a copy) and returns the object that the webhook then sees. The fake client keeps no managed
// fields and does not always return the object's apiVersion and kind; the object keeps its own, as the API
// server's bookkeeping, so that only the change is a change.
func changed[T client.Object](t testing.TB, old T, patch types.PatchType, body string, update func(T)) T {
	t.Helper()
	seed := old.DeepCopyObject().(client.Object)
	seed.SetManagedFields(nil)
	c := fake.NewClientBuilder().WithObjects(seed).Build()
	cur := seed.DeepCopyObject().(T)
	defer func() {
		cur.SetManagedFields(old.GetManagedFields())
		cur.GetObjectKind().SetGroupVersionKind(old.GetObjectKind().GroupVersionKind())
	}()
	var err error
	if patch != "" {
		err = c.Patch(context.Background(), cur, client.RawPatch(patch, []byte(body)))
	} else {
		if err = c.Get(context.Background(), client.ObjectKeyFromObject(old), cur); err == nil {
			update(cur)
			err = c.Update(context.Background(), cur)
		}
	}
	if err != nil {
		t.Fatalf("applying the change: %v", err)
	}
	return cur
}

func TestCheckPod(t *testing.T) {
	f := newFixture(t)
	j := asServer(t, f.job(t, "k8s_get_pod_status", podParams(), ""))
	cl := &fakeCluster{jobs: []*batchv1.Job{j}}
	f.c.Cluster = cl
	f.pods = admittedJobs(t, j)
	f.c.Pods = f.pods
	ctx := context.Background()
	jc := Request{Operation: "CREATE", User: DefaultJobControllerUsers[0], Namespace: j.Namespace}
	check := func(r Request, p *corev1.Pod) error {
		_, err := f.c.CheckPod(ctx, r, obj(t, p), nil)
		return err
	}
	if err := check(Request{Operation: "CREATE", User: jc.User, Namespace: j.Namespace, DryRun: true}, podOf(t, j)); err != nil {
		t.Fatalf("dry run of the Job's pod denied: %v", err)
	}
	if err := check(jc, podOf(t, j)); err != nil {
		t.Fatalf("pod from the job controller denied: %v", err)
	}
	// The corpus's unsafe Pods (test/corpus/cases), for a Job that already had its Pod: each is refused, and
	// the ledger still holds only that first Pod.
	for _, c := range cases.Pods() {
		t.Run("corpus/"+c.Name, func(t *testing.T) {
			f.pods = admittedJobs(t, j)
			f.c.Pods = f.pods
			if err := f.pods.RecordPod(ctx, j.UID, time.Time{}); err != nil {
				t.Fatal(err)
			}
			cl.jobs = []*batchv1.Job{j}
			p := podOf(t, j)
			if c.Mutate != nil {
				c.Mutate(p)
			}
			req := Request{Operation: "CREATE", User: "alice", Namespace: j.Namespace}
			if c.ByJobController {
				req = jc
			}
			if err := check(req, p); ruleOf(err) != c.Rule {
				t.Fatalf("rule %q (%v), want %q", ruleOf(err), err, c.Rule)
			}
			if len(f.pods.seen) != 1 {
				t.Fatal("a refused Pod was recorded in the ledger")
			}
		})
	}
	// Pods for a Job in a state the corpus does not bring an admitted Job into: suspending it, like any
	// change, is refused after admission, and failing or deleting it at a chosen moment needs a Job
	// controller and a kubelet it does not drive. (The corpus runs one Job to its end for its "Pod for a
	// finished Job".) Each is refused before the ledger: use a fresh ledger to be sure of that.
	tests := []struct {
		name   string
		req    Request
		mutate func(p *corev1.Pod)
		job    func(j *batchv1.Job)
		rule   string
	}{
		{"suspended Job", jc, nil, func(j *batchv1.Job) { j.Spec.Suspend = ptr.To(true) }, "owner-job"},
		{"finished Job", jc, nil, func(j *batchv1.Job) {
			j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
		}, "owner-job"},
		{"failed Job", jc, nil, func(j *batchv1.Job) {
			j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue}}
		}, "owner-job"},
		{"Job being deleted", jc, nil, func(j *batchv1.Job) { j.DeletionTimestamp = ptr.To(metav1.Now()) }, "owner-job"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.pods = admittedJobs(t, j)
			f.c.Pods = f.pods
			jj := j.DeepCopy()
			if tt.job != nil {
				tt.job(jj)
			}
			cl.jobs = []*batchv1.Job{jj}
			p := podOf(t, jj)
			if tt.mutate != nil {
				tt.mutate(p)
			}
			if err := check(tt.req, p); ruleOf(err) != tt.rule {
				t.Fatalf("rule %q (%v), want %q", ruleOf(err), err, tt.rule)
			}
			if len(f.pods.seen) != 0 {
				t.Fatal("a refused Pod was recorded in the ledger")
			}
		})
	}

	// Updates: the bookkeeping of the Job controller, the garbage collector and the kubelet is allowed, and
	// only the garbage collector orphans a Pod (the corpus's orphan cases try it as everyone else); every
	// change of the corpus (test/corpus/cases), applied as the API server applies it, is refused.
	old := podOf(t, j)
	updates := []struct {
		name   string
		mutate func(p *corev1.Pod)
		ok     bool
	}{
		{"tracking finalizer removed", func(p *corev1.Pod) { p.Finalizers = nil }, true},
		{"orphaned by the garbage collector", func(p *corev1.Pod) { p.OwnerReferences = nil }, true},
		{"owner reference removed by someone else", func(p *corev1.Pod) { p.OwnerReferences = nil }, false},
		{"foreground finalizer added", func(p *corev1.Pod) { p.Finalizers = append(p.Finalizers, "foregroundDeletion") }, true},
		{"status", func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning }, true},
	}
	for _, c := range cases.PodChanges() {
		updates = append(updates, struct {
			name   string
			mutate func(p *corev1.Pod)
			ok     bool
		}{"corpus/" + c.Name, func(p *corev1.Pod) { *p = *changed(t, p, c.Patch, c.Body, nil) }, false})
	}
	for _, tt := range updates {
		n := old.DeepCopy()
		tt.mutate(n)
		user := "someone"
		if strings.Contains(tt.name, "garbage collector") {
			user = "system:serviceaccount:kube-system:generic-garbage-collector"
		}
		_, err := f.c.CheckPod(ctx, Request{Operation: "UPDATE", User: user}, obj(t, n), obj(t, old))
		if tt.ok != (err == nil) || (!tt.ok && ruleOf(err) != cases.Immutable) {
			t.Errorf("update %s: %v", tt.name, err)
		}
	}
}

type fakeCluster struct {
	jobs []*batchv1.Job
	pods []*corev1.Pod
}

func (c *fakeCluster) GetJob(_ context.Context, ns, name string) (*batchv1.Job, error) {
	for _, j := range c.jobs {
		if j.Name == name && j.Namespace == ns {
			return j, nil
		}
	}
	return nil, errors.New("not found")
}

func (c *fakeCluster) GetPod(_ context.Context, ns, name string) (*corev1.Pod, error) {
	for _, p := range c.pods {
		if p.Name == name && p.Namespace == ns {
			return p, nil
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
	j := obj(b, asServer(b, f.job(b, "k8s_get_pod_status", podParams(), "")))
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
	j := asServer(b, f.job(b, "k8s_get_pod_status", podParams(), ""))
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
