package service

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	approvalstore "github.com/agent-sandbox/agent-sandbox/internal/approval/store"
	"github.com/agent-sandbox/agent-sandbox/internal/audit"
	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/policy/policytest"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/toolrun"
)

// fakeRunner stands in for the cluster in these unit tests of the service's logic; the end-to-end suite
// runs the same service against real gVisor Jobs.
type fakeRunner struct {
	mu     sync.Mutex
	jobs   []*batchv1.Job
	claims []string
	stdout func(job *batchv1.Job) string
	exit   int32
	err    error
	// warmError, when set, is the tool error of every run on a warm Pod (claim set).
	warmError string
	// queue, when set, stands for a call that waits for a concurrency slot: RunCall waits for it to be
	// closed (or for ctx) before it takes the slot.
	queue chan struct{}
	// afterSlot, when set, is what RunCall returns once it holds the slot and ran the call's hook (a Job
	// that could not be created, a call cancelled while it runs).
	afterSlot func(ctx context.Context, job *batchv1.Job) (*sandbox.Result, error)
}

func (f *fakeRunner) RunCall(ctx context.Context, job *batchv1.Job, claim string, progress func(sandbox.Stage, string)) (*sandbox.Result, error) {
	if f.queue != nil {
		select {
		case <-f.queue:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", sandbox.ErrNotSent, ctx.Err()) // as the real runner: nothing created, the hook never ran
		}
	}
	// As the real runner: the call's hook (its workspace) runs once it holds its slot, before any Job.
	if err := sandbox.RunBeforeCreate(ctx); err != nil {
		return nil, fmt.Errorf("%w: %w", sandbox.ErrNotSent, err)
	}
	if f.afterSlot != nil {
		return f.afterSlot(ctx, job)
	}
	f.mu.Lock()
	f.jobs = append(f.jobs, job)
	f.claims = append(f.claims, claim)
	f.mu.Unlock()
	name := job.Name
	if claim != "" && f.warmError != "" {
		name = fakeWarmJob // as the real runner, which reports the warm Job that served the call
	}
	for _, st := range sandbox.Stages {
		progress(st, name)
	}
	if f.err != nil {
		return nil, f.err
	}
	res := &sandbox.Result{JobName: job.Name, ExitCode: f.exit, ResultError: "the credential agent reported no result", CredentialEvents: []map[string]any{
		{"event": audit.EventCredentialIssued, "scope": "pod-reader", "lease_id": "kubernetes/creds/x/abc", "ttl_seconds": 600.0},
		{"event": audit.EventCredentialRevoked, "lease_id": "kubernetes/creds/x/abc"},
	}}
	if claim != "" && f.warmError != "" {
		res.JobName, res.Warm, res.ExitCode, res.ResultError = fakeWarmJob, true, 1, f.warmError
		return res, nil
	}
	// The tool's result travels as the credential agent's tool.result event: one JSON object.
	if out := strings.TrimSpace(f.stdout(job)); out != "" {
		res.Output, res.ResultError = []byte(out[strings.LastIndex(out, "\n")+1:]), ""
	}
	return res, nil
}

// fakeWarmJob is the warm Job whose Pod fakeRunner pretends to claim.
const fakeWarmJob = "as-k8s-get-pod-status-w0123456789a"

type fakeWorkspaces struct {
	mu      sync.Mutex
	names   []string
	plans   map[string][]byte
	exists  map[string]bool
	deleted []string
}

func (f *fakeWorkspaces) EnsureWorkspace(_ context.Context, name string, _ map[string]string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.names = append(f.names, name)
	if f.exists == nil {
		f.exists = map[string]bool{}
	}
	created := !f.exists[name]
	f.exists[name] = true
	return created, nil
}

func (f *fakeWorkspaces) DeleteWorkspace(_ context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.exists, name)
	f.deleted = append(f.deleted, name)
	return nil
}

func (f *fakeWorkspaces) EnsurePlan(_ context.Context, id string, plan []byte) error {
	if f.plans == nil {
		f.plans = map[string][]byte{}
	}
	f.plans[id] = plan
	return nil
}

func (f *fakeWorkspaces) PlanExists(_ context.Context, id string) error {
	if _, ok := f.plans[id]; !ok {
		return fmt.Errorf("no saved plan %s", id[:12])
	}
	return nil
}

type fixture struct {
	svc   *Service
	run   *fakeRunner
	store *approvalstore.Store
	log   string
	key   *approval.PrivateKey
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	p, err := policy.LoadFile("../../policy/policy.yaml", policy.WithoutAdmissionRules())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	store, err := approvalstore.Open(filepath.Join(dir, "approvals.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	logPath := filepath.Join(dir, "audit.jsonl")
	log, err := audit.Open(logPath, audit.WithSync(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	ws := filepath.Join(dir, "workspaces", "k8s-demo")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "main.tf"), []byte("resource \"kubernetes_namespace\" \"x\" {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	key, err := approval.GenerateKey("unit-approver")
	if err != nil {
		t.Fatal(err)
	}
	run := &fakeRunner{stdout: func(*batchv1.Job) string {
		return `{"namespace":"demo-app","selector":"","pods":[{"name":"web-1","phase":"Running","ready":"1/1","restarts":0,"age":"1m","age_seconds":60,"node":"n"}],"total":1,"truncated":false}`
	}}
	svc := &Service{Policy: p, Approvals: store, Audit: log, Runner: run, Workspaces: &fakeWorkspaces{}, WorkspaceDir: filepath.Join(dir, "workspaces")}
	return &fixture{svc: svc, run: run, store: store, log: logPath, key: key}
}

// podStatus, plan and apply call the default policy's tools through the one call path, and read the
// structured result back into the Go type a client would.
func (f *fixture) podStatus(ctx context.Context, args map[string]any, p Progress) (*PodStatusOutput, error) {
	out, err := f.svc.Call(ctx, "k8s_get_pod_status", args, p)
	if err != nil {
		return nil, err
	}
	var ps PodStatusOutput
	data, _ := json.Marshal(out)
	if err := json.Unmarshal(data, &ps); err != nil {
		return nil, err
	}
	return &ps, nil
}

func (f *fixture) plan(ctx context.Context, workspace string) (*PlanOutput, error) {
	out, err := f.svc.Call(ctx, "terraform_plan", map[string]any{"workspace": workspace}, nil)
	if err != nil {
		return nil, err
	}
	return out.(*PlanOutput), nil
}

func (f *fixture) apply(ctx context.Context, planID string) (*ApplyOutput, error) {
	out, err := f.svc.Call(ctx, "terraform_apply", map[string]any{"workspace": "k8s-demo", "plan_id": planID}, nil)
	if err != nil {
		return nil, err
	}
	return out.(*ApplyOutput), nil
}

// chain returns the events written for one request ID, after checking that the whole log verifies.
// approve grants request id as a person would: what `agent-sandbox approve` does after the terminal prompt.
// It returns the signed token.
func (f *fixture) approve(ctx context.Context, t *testing.T, id string) string {
	t.Helper()
	req, err := f.store.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	claims, err := approval.NewClaims(req, f.key.KeyID(), f.svc.Policy.Spec.ClusterID, time.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := approval.Sign(f.key, claims)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.store.Grant(ctx, req.ID, tok, &claims); err != nil {
		t.Fatal(err)
	}
	return tok
}

func (f *fixture) chain(t *testing.T, requestID string) []string {
	t.Helper()
	if _, err := audit.VerifyFile(f.log); err != nil {
		t.Fatal(err)
	}
	recs, err := audit.ReadFile(f.log, audit.Filter{RequestID: requestID})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range recs {
		names = append(names, r.Event)
	}
	return names
}

var fullChain = []string{audit.EventToolRequest, audit.EventGuardrailDecision, audit.EventSandboxStarted, audit.EventCredentialIssued,
	audit.EventSandboxCompleted, audit.EventCredentialRevoked, audit.EventToolResult}

func TestPodStatusWritesTheFullChain(t *testing.T) {
	f := newFixture(t)
	var stages []string
	out, err := f.podStatus(context.Background(), map[string]any{"namespace": "demo-app"}, func(s string, n, total int) { stages = append(stages, s) })
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Pods) != 1 || out.Pods[0].Name != "web-1" {
		t.Errorf("result %+v", out)
	}
	if got := f.chain(t, out.RequestID); !slices.Equal(got, fullChain) {
		t.Errorf("audit chain %v, want %v", got, fullChain)
	}
	if len(stages) != len(sandbox.Stages) {
		t.Errorf("progress %v", stages)
	}
	j := f.run.jobs[0]
	if j.Labels[contract.LabelRequestID] != out.RequestID || j.Spec.Template.Spec.Containers[0].Command[3] != "--namespace=demo-app" {
		t.Errorf("rendered Job: labels %v command %v", j.Labels, j.Spec.Template.Spec.Containers[0].Command)
	}
}

func TestGuardrails(t *testing.T) {
	f := newFixture(t)
	_, err := f.podStatus(context.Background(), map[string]any{"namespace": "kube-system"}, nil)
	var se *Error
	if !errors.As(err, &se) || se.Kind != KindDenied || !strings.Contains(se.Message, "kube-system") {
		t.Fatalf("kube-system: %v", err)
	}
	if got := f.chain(t, se.RequestID); !slices.Equal(got, []string{audit.EventToolRequest, audit.EventGuardrailDecision, audit.EventToolResult}) {
		t.Errorf("chain of a refusal: %v", got)
	}
	_, err = f.podStatus(context.Background(), map[string]any{"namespace": "demo-app", "label_selector": "--kubeconfig=/x"}, nil)
	if !errors.As(err, &se) || se.Kind != KindInvalid {
		t.Fatalf("bad selector: %v", err)
	}
	if _, err := f.plan(context.Background(), "../etc"); !errors.As(err, &se) || se.Kind != KindInvalid {
		t.Fatalf("path traversal in the workspace name: %v", err)
	}
	if len(f.run.jobs) != 0 {
		t.Errorf("a refused call ran %d sandboxes", len(f.run.jobs))
	}
}

func TestToolFailureIsReported(t *testing.T) {
	f := newFixture(t)
	f.run.exit = 1
	f.run.stdout = func(*batchv1.Job) string { return `{"error":"pods is forbidden"}` }
	_, err := f.podStatus(context.Background(), map[string]any{"namespace": "demo-app"}, nil)
	var se *Error
	if !errors.As(err, &se) || se.Kind != KindFailed || !strings.Contains(se.Message, "pods is forbidden") {
		t.Fatalf("got %v", err)
	}
	// A zero-looking result from a tool that exited non-zero is not trusted.
	f.run.stdout = func(*batchv1.Job) string { return `{"namespace":"demo-app","pods":[]}` }
	if _, err := f.podStatus(context.Background(), map[string]any{"namespace": "demo-app"}, nil); !errors.As(err, &se) || !strings.Contains(se.Message, "exited with code 1") {
		t.Fatalf("got %v", err)
	}
}

func TestApplyNeedsAnApprovalForExactlyThisPlanOnce(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	plan := strings.Repeat("ab", 32)
	// The saved plans exist (terraform_plan stored them).
	f.svc.Workspaces.(*fakeWorkspaces).plans = map[string][]byte{plan: nil, strings.Repeat("cd", 32): nil}
	f.run.stdout = func(j *batchv1.Job) string {
		return `{"workspace":"k8s-demo","plan_id":"` + plan + `","applied":true,"text":"Apply complete!","summary":{"add":1,"change":0,"destroy":1,"replace":1}}`
	}

	first, err := f.apply(ctx, plan)
	if err != nil {
		t.Fatal(err)
	}
	if first.Status != StatusApprovalRequired || first.ApproveCommand != "agent-sandbox approve "+first.ApprovalRequest || len(f.run.jobs) != 0 {
		t.Fatalf("without approval: %+v (jobs %d)", first, len(f.run.jobs))
	}
	again, _ := f.apply(ctx, plan)
	if again.ApprovalRequest != first.ApprovalRequest {
		t.Errorf("the same call filed a second request: %s and %s", first.ApprovalRequest, again.ApprovalRequest)
	}

	// A person approves (what `agent-sandbox approve` does after the terminal prompt).
	tok := f.approve(ctx, t, first.ApprovalRequest)

	// An approval for this plan does not cover another.
	other, err := f.apply(ctx, strings.Repeat("cd", 32))
	if err != nil || other.Status != StatusApprovalRequired || len(f.run.jobs) != 0 {
		t.Fatalf("another plan: %+v, %v", other, err)
	}

	applied, err := f.apply(ctx, plan)
	if err != nil {
		t.Fatal(err)
	}
	if applied.Status != StatusApplied || len(f.run.jobs) != 1 {
		t.Fatalf("after approval: %+v", applied)
	}
	if got := f.run.jobs[0].Annotations[contract.AnnotationApprovalToken]; got != tok {
		t.Error("the Job does not carry the approval token")
	}
	want := []string{audit.EventToolRequest, audit.EventGuardrailDecision, audit.EventApprovalGranted, audit.EventApprovalConsumed,
		audit.EventSandboxStarted, audit.EventCredentialIssued, audit.EventSandboxCompleted, audit.EventCredentialRevoked, audit.EventToolResult}
	if got := f.chain(t, applied.RequestID); !slices.Equal(got, want) {
		t.Errorf("chain %v, want %v", got, want)
	}
	logData, _ := os.ReadFile(f.log)
	if strings.Contains(string(logData), tok) || strings.Contains(string(logData), tok[:40]) {
		t.Error("the approval token reached the audit log")
	}

	replay, err := f.apply(ctx, plan)
	if err != nil || replay.Status != StatusApprovalRequired || replay.ApprovalRequest == first.ApprovalRequest || len(f.run.jobs) != 1 {
		t.Fatalf("the grant was used twice: %+v, %v", replay, err)
	}
}

func TestPlanFlagsDestructiveChanges(t *testing.T) {
	f := newFixture(t)
	text := "  # kubernetes_deployment.web must be replaced\n      ~ match_labels = { # forces replacement\nPlan: 1 to add, 0 to change, 1 to destroy."
	saved := []byte("PK\x03\x04 the saved plan")
	res, _ := json.Marshal(toolrun.PlanResult{Workspace: "k8s-demo", PlanID: toolrun.PlanID(saved), Text: text, Plan: saved,
		Summary: toolrun.PlanSummary{Add: 1, Destroy: 1, Replace: 1}})
	f.run.stdout = func(*batchv1.Job) string { return "Terraform output on stderr\n" + string(res) }
	out, err := f.plan(context.Background(), "k8s-demo")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range out.DestructiveSignals {
		names = append(names, s.Name)
	}
	if !out.Destructive || !slices.Contains(names, "forces-replacement") || !strings.HasPrefix(out.Next, "DESTRUCTIVE") {
		t.Errorf("plan output %+v", out)
	}
	src := f.run.jobs[0].Spec.Template.Spec.Volumes
	if !strings.HasPrefix(src[len(src)-1].ConfigMap.Name, "tfws-") {
		t.Errorf("the workspace ConfigMap is not mounted: %+v", src)
	}
	if got := f.svc.Workspaces.(*fakeWorkspaces).plans[out.PlanID]; string(got) != string(saved) || out.PlanResult.Plan != nil {
		t.Errorf("the saved plan was not stored as it came (%q), or was returned to the agent", got)
	}
	// The approval request later shows the approver this plan's summary and signals, also from a server
	// that was restarted in between (the description is in the approvals database, not in memory).
	restarted := &Service{Policy: f.svc.Policy, Approvals: f.store, Audit: f.svc.Audit, Runner: f.run, Workspaces: f.svc.Workspaces, WorkspaceDir: f.svc.WorkspaceDir}
	summary, signals := restarted.planSummary(context.Background(), out.PlanID)
	if !strings.Contains(summary, "1 to replace") || len(signals) == 0 {
		t.Errorf("summary %q, signals %v", summary, signals)
	}
}

// TestApprovalOfACallNeverSentIsGivenBack: an approved apply cancelled while it waits for a slot, or whose
// Job the cluster could not be reached to create, was never seen by any webhook: its approval is given back
// (the chain says so before the result) and the same call, made again, runs with the very token — once.
// An apply whose Job was sent (and refused) keeps its approval used.
func TestApprovalOfACallNeverSentIsGivenBack(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	plan := strings.Repeat("ab", 32)
	f.svc.Workspaces.(*fakeWorkspaces).plans = map[string][]byte{plan: nil}
	f.run.stdout = func(j *batchv1.Job) string {
		return `{"workspace":"k8s-demo","plan_id":"` + plan + `","applied":true,"text":"Apply complete!","summary":{"add":1,"change":0,"destroy":0,"replace":0}}`
	}
	first, err := f.apply(ctx, plan)
	if err != nil {
		t.Fatal(err)
	}
	tok := f.approve(ctx, t, first.ApprovalRequest)

	// Cancelled in the queue.
	f.run.queue = make(chan struct{})
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := f.apply(cctx, plan); done <- err }()
	time.Sleep(50 * time.Millisecond)
	cancel()
	err = <-done
	var se *Error
	if !errors.As(err, &se) || !strings.Contains(se.Message, "cancelled before its sandbox Job was created") || !strings.Contains(se.Message, "stays granted") {
		t.Fatalf("cancelled in the queue: %v", err)
	}
	want := []string{audit.EventToolRequest, audit.EventGuardrailDecision, audit.EventApprovalGranted, audit.EventApprovalConsumed,
		audit.EventApprovalReturned, audit.EventToolResult}
	if got := f.chain(t, se.RequestID); !slices.Equal(got, want) {
		t.Errorf("chain %v, want %v", got, want)
	}
	if r, _ := f.store.Get(ctx, first.ApprovalRequest); r.Status != approval.StatusGranted {
		t.Errorf("after the cancelled call the approval is %s", r.Status)
	}

	// The cluster not reachable to create the Job.
	f.run.queue = nil
	f.run.afterSlot = func(context.Context, *batchv1.Job) (*sandbox.Result, error) {
		return nil, fmt.Errorf("%w: %w: dial tcp 10.0.0.1:6443: connect: connection refused", sandbox.ErrNotSent, sandbox.ErrClusterDown)
	}
	if _, err := f.apply(ctx, plan); !errors.As(err, &se) || !strings.Contains(se.Message, "stays granted") {
		t.Fatalf("cluster out of reach: %v", err)
	}

	// The webhook down: the Job mutating webhook could not be called, so no validating webhook saw the Job.
	f.run.afterSlot = func(context.Context, *batchv1.Job) (*sandbox.Result, error) {
		return nil, fmt.Errorf("%w: %w: Internal error occurred: failed calling webhook %q: connect: connection refused",
			sandbox.ErrRefusedBeforeCheck, sandbox.ErrWebhookDown, contract.WebhookMutateJobs)
	}
	if _, err := f.apply(ctx, plan); !errors.As(err, &se) || !strings.Contains(se.Message, "stays granted") {
		t.Fatalf("webhook down: %v", err)
	}

	// Made again: it runs with the very token.
	f.run.afterSlot = nil
	applied, err := f.apply(ctx, plan)
	if err != nil || applied.Status != StatusApplied || len(f.run.jobs) != 1 || f.run.jobs[0].Annotations[contract.AnnotationApprovalToken] != tok {
		t.Fatalf("made again: %+v, %v (jobs %d)", applied, err, len(f.run.jobs))
	}
	if again, err := f.apply(ctx, plan); err != nil || again.Status != StatusApprovalRequired || len(f.run.jobs) != 1 {
		t.Fatalf("the approval was used twice: %+v, %v", again, err)
	}

	// Sent and refused: the approval stays used.
	second, _ := f.apply(ctx, plan)
	f.approve(ctx, t, second.ApprovalRequest)
	f.run.afterSlot = func(context.Context, *batchv1.Job) (*sandbox.Result, error) {
		return nil, fmt.Errorf("%w: admission webhook denied the request", sandbox.ErrDenied)
	}
	if _, err := f.apply(ctx, plan); !errors.As(err, &se) || strings.Contains(se.Message, "stays granted") {
		t.Fatalf("sent and refused: %v", err)
	}
	if r, _ := f.store.Get(ctx, second.ApprovalRequest); r.Status != approval.StatusConsumed {
		t.Errorf("after a refused Job the approval is %s", r.Status)
	}
}

// TestCreateFailedIsNamedInTheResult: a call whose Job create failed (the webhook may have admitted and
// anchored it before the API server refused it) names the Job in its tool.result, which settles the anchor
// (audit.FieldJobsCreateFailed); a call whose Job was created and then failed names none.
func TestCreateFailedIsNamedInTheResult(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  func(job *batchv1.Job) error
		want bool
	}{
		{"the create refused", func(job *batchv1.Job) error {
			return &sandbox.CreateError{Job: job.Name, Err: fmt.Errorf("%w: exceeded quota", sandbox.ErrDenied)}
		}, true},
		{"the sandbox failed", func(*batchv1.Job) error { return fmt.Errorf("%w: exit 1", sandbox.ErrSandboxFailed) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			var name string
			f.run.afterSlot = func(_ context.Context, job *batchv1.Job) (*sandbox.Result, error) {
				name = job.Name
				return nil, tc.err(job)
			}
			_, err := f.podStatus(context.Background(), map[string]any{"namespace": "demo-app"}, nil)
			var se *Error
			if !errors.As(err, &se) {
				t.Fatalf("got %v", err)
			}
			recs, err := audit.ReadFile(f.log, audit.Filter{RequestID: se.RequestID})
			if err != nil || len(recs) == 0 {
				t.Fatal(err)
			}
			last := recs[len(recs)-1]
			got, named := last.Fields[audit.FieldJobsCreateFailed]
			if last.Event != audit.EventToolResult || named != tc.want || (tc.want && fmt.Sprint(got) != "["+name+"]") {
				t.Errorf("last line %s %v; want a tool.result naming the Job: %v", last.Event, last.Fields, tc.want)
			}
		})
	}
}

func TestCancelledCall(t *testing.T) {
	f := newFixture(t)
	f.run.err = context.Canceled
	_, err := f.podStatus(context.Background(), map[string]any{"namespace": "demo-app"}, nil)
	var se *Error
	if !errors.As(err, &se) || !strings.Contains(se.Message, "cancelled") {
		t.Fatalf("got %v", err)
	}
}

// TestHugeArgumentIsBoundedInTheAudit is the review's case: begin() records the call's parameters before
// the policy looks at them, so a 16 MiB namespace used to be written whole.
func TestHugeArgumentIsBoundedInTheAudit(t *testing.T) {
	f := newFixture(t)
	huge := strings.Repeat("a", 16<<20)
	_, err := f.podStatus(context.Background(), map[string]any{"namespace": huge}, nil)
	var se *Error
	if !errors.As(err, &se) || se.Kind != KindInvalid {
		t.Fatalf("16 MiB namespace: %v", err)
	}
	if len(se.Message) > 1024 {
		t.Errorf("the error returned to the agent is %d bytes", len(se.Message))
	}
	data, err := os.ReadFile(f.log)
	if err != nil {
		t.Fatal(err)
	}
	for i, line := range bytes.Split(bytes.TrimSuffix(data, []byte{'\n'}), []byte{'\n'}) {
		if len(line) > audit.MaxLineBytes {
			t.Errorf("audit line %d is %d bytes", i+1, len(line))
		}
	}
	recs, err := audit.ReadFile(f.log, audit.Filter{RequestID: se.RequestID})
	if err != nil {
		t.Fatal(err)
	}
	params, _ := recs[0].Fields["params"].(map[string]any)
	ns, _ := params["namespace"].(map[string]any)
	sum := sha256.Sum256([]byte(huge))
	if ns[audit.FieldTruncated] != true || ns[audit.FieldTruncatedBytes] != float64(len(huge)) || ns[audit.FieldTruncatedSHA256] != hex.EncodeToString(sum[:]) {
		t.Errorf("namespace recorded as %v", ns)
	}
}

func TestToolsAreThePolicysCatalogue(t *testing.T) {
	f := newFixture(t)
	tools, err := f.svc.Tools()
	if err != nil {
		t.Fatal(err)
	}
	if len(tools) != len(f.svc.Policy.Spec.Tools) || len(tools) < 8 {
		t.Fatalf("%d tools for %d in the policy", len(tools), len(f.svc.Policy.Spec.Tools))
	}
	for _, tl := range tools {
		if tl.Name != "terraform_plan" {
			continue
		}
		// The workspace folders the server found are the agent's choices; the ConfigMap parameter is hidden.
		props := tl.InputSchema["properties"].(map[string]any)
		if _, ok := props["source"]; ok {
			t.Error("terraform_plan shows source")
		}
		if got := props["workspace"].(map[string]any)["enum"]; !slices.Equal(got.([]any), []any{"k8s-demo"}) {
			t.Errorf("workspace enum %v", got)
		}
		if req := tl.OutputSchema["required"].([]any); !slices.Contains(req, any("request_id")) {
			t.Errorf("output schema without request_id: %v", req)
		}
	}
}

func TestJSONResultIsCheckedAgainstThePolicysSchema(t *testing.T) {
	f := newFixture(t)
	// A phase outside the policy's enum: the agent never sees a result the policy did not declare.
	f.run.stdout = func(*batchv1.Job) string {
		return `{"namespace":"demo-app","selector":"","pods":[{"name":"web-1","phase":"Exploded","ready":"1/1","restarts":0,"age":"1m","age_seconds":60,"node":"n"}],"total":1,"truncated":false}`
	}
	_, err := f.podStatus(context.Background(), map[string]any{"namespace": "demo-app"}, nil)
	var se *Error
	if !errors.As(err, &se) || se.Kind != KindFailed || !strings.Contains(se.Message, "schema") {
		t.Fatalf("got %v", err)
	}
}

func TestServerFilledParametersAreNotTheAgents(t *testing.T) {
	f := newFixture(t)
	_, err := f.svc.Call(context.Background(), "terraform_plan", map[string]any{"workspace": "k8s-demo", "source": "tfws-00000000000000000000"}, nil)
	var se *Error
	if !errors.As(err, &se) || se.Kind != KindInvalid || len(f.svc.Workspaces.(*fakeWorkspaces).names) != 0 {
		t.Fatalf("an agent naming the workspace ConfigMap: %v (published %v)", err, f.svc.Workspaces.(*fakeWorkspaces).names)
	}
}

func TestReadToolRunsWithoutApproval(t *testing.T) {
	f := newFixture(t)
	f.run.stdout = func(*batchv1.Job) string {
		return `{"namespace":"demo-app","kind":"deployment","name":"web","status":"complete","message":"ok","generation":2,"observed_generation":2,"replicas":1,"updated_replicas":1,"ready_replicas":1,"available_replicas":1,"conditions":[]}`
	}
	out, err := f.svc.Call(context.Background(), "k8s_rollout_status", map[string]any{"namespace": "demo-app", "name": "web"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := out.(map[string]any)
	if m["status"] != "complete" || !strings.HasPrefix(m["request_id"].(string), "req-") {
		t.Errorf("result %v", m)
	}
	if got := f.run.jobs[0].Spec.Template.Spec.Containers[0].Command; !slices.Contains(got, "--kind=deployment") || !slices.Contains(got, "--name=web") {
		t.Errorf("argv %v", got)
	}
	if got := f.chain(t, m["request_id"].(string)); !slices.Equal(got, fullChain) {
		t.Errorf("chain %v", got)
	}
}

// TestCustomToolFromThePolicyFile: a tool declared only in YAML (examples/policy/custom-tool.yaml, spliced
// into the shipped policy) is offered and runs through the same call path, its result checked against the
// schema it declares.
func TestCustomToolFromThePolicyFile(t *testing.T) {
	f := newFixture(t)
	doc, _ := policytest.Spliced(t, "../../policy/policy.yaml", "../../examples/policy/custom-tool.yaml")
	var err error
	if f.svc.Policy, err = policy.Load(policytest.YAML(t, doc), policy.WithoutAdmissionRules()); err != nil {
		t.Fatal(err)
	}
	tools, err := f.svc.Tools()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(tools, func(tl ToolInfo) bool { return tl.Name == "k8s_list_services" && tl.Title == "Kubernetes services" }) {
		t.Fatal("the custom tool is not offered")
	}
	f.run.stdout = func(*batchv1.Job) string {
		return `{"namespace":"demo-app","kind":"service","items":[{"name":"web","service":{"type":"ClusterIP"}}],"total":1,"truncated":false}`
	}
	out, err := f.svc.Call(context.Background(), "k8s_list_services", map[string]any{"namespace": "demo-app"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.run.jobs[0].Spec.Template.Spec.Containers[0].Command; !slices.Equal(got, []string{"/agent-sandbox", "run", "describe", "--namespace=demo-app", "--kind=service"}) {
		t.Errorf("argv %v", got)
	}
	if out.(map[string]any)["total"] != float64(1) {
		t.Errorf("result %v", out)
	}
	f.run.stdout = func(*batchv1.Job) string {
		return `{"namespace":"demo-app","kind":"secret","items":[],"total":0,"truncated":false}`
	}
	if _, err := f.svc.Call(context.Background(), "k8s_list_services", map[string]any{"namespace": "demo-app"}, nil); err == nil {
		t.Error("a result outside the tool's declared schema was passed on")
	}
}

// A read tool whose warm Pod could not reach the API server runs once more, cold; the audit says so. Any
// other failure on a warm Pod is the call's answer.
func TestWarmUnreachableAPIRunsOnceMoreCold(t *testing.T) {
	f := newFixture(t)
	f.svc.Warm = true
	f.run.warmError = `k8s_get_pod_status failed: list pods in demo-app: Get "https://192.0.2.2:6443/api/v1/namespaces/demo-app/pods": dial tcp 192.0.2.2:6443: i/o timeout`
	out, err := f.podStatus(context.Background(), map[string]any{"namespace": "demo-app"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.run.claims) != 2 || f.run.claims[0] == "" || f.run.claims[1] != "" {
		t.Fatalf("runs %d, claims %q: want a warm run, then a cold one", len(f.run.claims), f.run.claims)
	}
	if got := f.chain(t, out.RequestID); !slices.Contains(got, EventSandboxRetried) || got[len(got)-1] != audit.EventToolResult {
		t.Errorf("audit chain %v lacks %s or does not end in the result", got, EventSandboxRetried)
	}

	f = newFixture(t)
	f.svc.Warm = true
	f.run.warmError = "k8s_get_pod_status failed: pods is forbidden"
	if _, err := f.podStatus(context.Background(), map[string]any{"namespace": "demo-app"}, nil); err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Fatalf("a warm run's own failure: %v", err)
	}
	if len(f.run.claims) != 1 {
		t.Errorf("a failure other than an unreachable API server was retried (%d runs)", len(f.run.claims))
	}
}

// TestCallIsAnchored: the Job of a call (and the claim of a warm one) carries the audit chain's head, read
// after the call's tool.request and decision were written; the anchor the webhook makes from it holds for
// the log the call wrote, and no longer once the log's last line is cut off.
func TestCallIsAnchored(t *testing.T) {
	f := newFixture(t)
	f.svc.Warm = true
	f.run.warmError = `k8s_get_pod_status failed: dial tcp 192.0.2.2:6443: i/o timeout` // warm, then cold
	out, err := f.podStatus(context.Background(), map[string]any{"namespace": "demo-app"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := audit.ReadFile(f.log, audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	job := f.run.jobs[1]
	head := job.Annotations[contract.AnnotationAuditHead]
	if len(recs) < 3 || head != sha256Hex(recs[1].Raw) || recs[1].Event != audit.EventGuardrailDecision {
		t.Fatalf("the Job's audit head %q is not the hash of the call's decision, line 2", head)
	}
	if _, ok := job.Spec.Template.Annotations[contract.AnnotationAuditHead]; ok {
		t.Error("the audit head is on the pod template too")
	}
	claim, err := sandbox.ParseClaim(f.run.claims[0])
	if err != nil || claim.AuditHead != head {
		t.Fatalf("the claim's audit head %q, want the Job's %q (%v)", claim.AuditHead, head, err)
	}
	now := time.Now()
	anchors := []audit.Anchor{
		{RequestID: out.RequestID, Head: head, Tool: "k8s_get_pod_status", Job: fakeWarmJob, Admitted: now, Deadline: 2 * time.Minute},
		{RequestID: out.RequestID, Head: head, Tool: "k8s_get_pod_status", Job: job.Name, Admitted: now, Deadline: 2 * time.Minute},
	}
	later := now.Add(time.Hour)
	if _, rep, err := audit.VerifyFileAnchors(f.log, anchors, later); err != nil || rep.OK != 2 {
		t.Fatalf("the call's own log against its anchors: %+v, %v", rep, err)
	}
	b, err := os.ReadFile(f.log)
	if err != nil {
		t.Fatal(err)
	}
	b = b[:bytes.LastIndexByte(b[:len(b)-1], '\n')+1]
	if err := os.WriteFile(f.log, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, rep, err := audit.VerifyFileAnchors(f.log, anchors, later); err != nil || rep.Failed != 2 {
		t.Fatalf("the log without its last line: %+v, %v; want both anchors failed", rep, err)
	}
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// approveAs grants request id as the approver key would through `agent-sandbox approve`, returning the token.
func (f *fixture) approveAs(ctx context.Context, t *testing.T, key *approval.PrivateKey, id string) string {
	t.Helper()
	req, err := f.store.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	claims, err := approval.NewClaims(req, key.KeyID(), f.svc.Policy.Spec.ClusterID, time.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := approval.Sign(key, claims)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.store.Grant(ctx, req.ID, tok, &claims); err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestApplyNeedsTwoApprovers: a plan that needs two approvers does not run after the first approval; the agent
// is told how far it is ("1 of 2 approvals given") and to ask a second person; after the second the Job runs
// carrying both tokens, and the audit chain names both approvers.
func TestApplyNeedsTwoApprovers(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	plan := strings.Repeat("ab", 32)
	f.svc.Workspaces.(*fakeWorkspaces).plans = map[string][]byte{plan: nil}
	f.run.stdout = func(j *batchv1.Job) string {
		return `{"workspace":"k8s-demo","plan_id":"` + plan + `","applied":true,"text":"Apply complete!","summary":{"add":0,"change":0,"destroy":1,"replace":0}}`
	}
	first, err := f.apply(ctx, plan)
	if err != nil || first.Status != StatusApprovalRequired || first.Approvals != 0 || first.ApprovalsRequired != 1 {
		t.Fatalf("first apply: %+v, %v", first, err)
	}
	// The first approver's tool finds the plan needs two approvers and raises the request (approve does).
	if err := f.store.RaiseApprovalsRequired(ctx, first.ApprovalRequest, 2); err != nil {
		t.Fatal(err)
	}
	none, err := f.apply(ctx, plan)
	if err != nil || none.ApprovalRequest != first.ApprovalRequest || none.ApprovalsRequired != 2 ||
		!strings.Contains(none.Message, "0 of 2 approvals given; this call needs 2 different people") {
		t.Fatalf("before any approval: %+v, %v", none, err)
	}
	alice := f.approveAs(ctx, t, f.key, first.ApprovalRequest)
	half, err := f.apply(ctx, plan)
	if err != nil {
		t.Fatal(err)
	}
	want := "approval required: 1 of 2 approvals given; ask a second person to review and run `agent-sandbox approve " + first.ApprovalRequest + "`"
	if half.Status != StatusApprovalRequired || half.ApprovalRequest != first.ApprovalRequest || half.Approvals != 1 || half.ApprovalsRequired != 2 ||
		!strings.HasPrefix(half.Message, want) || len(f.run.jobs) != 0 {
		t.Fatalf("after one of two approvals: %+v (jobs %d)", half, len(f.run.jobs))
	}
	st, err := f.svc.ApprovalStatus(ctx, ApprovalStatusInput{RequestID: first.ApprovalRequest})
	if err != nil || st.Status != "pending" || st.Approvals != 1 || st.ApprovalsRequired != 2 || len(st.Approvers) != 1 {
		t.Fatalf("approval_status after one of two: %+v, %v", st, err)
	}
	second, err := approval.GenerateKey("second-approver")
	if err != nil {
		t.Fatal(err)
	}
	bob := f.approveAs(ctx, t, second, first.ApprovalRequest)
	applied, err := f.apply(ctx, plan)
	if err != nil || applied.Status != StatusApplied || len(f.run.jobs) != 1 || applied.Approvals != 2 || applied.ApprovalsRequired != 2 ||
		!strings.Contains(applied.Message, "approved by unit-approver and second-approver") {
		t.Fatalf("after both approvals: %+v, %v", applied, err)
	}
	if got := f.run.jobs[0].Annotations[contract.AnnotationApprovalToken]; got != alice+","+bob {
		t.Error("the Job does not carry both approvals, in the order given")
	}
	chain := f.chain(t, applied.RequestID)
	if n := slices.Index(chain, audit.EventApprovalConsumed); n != 4 || chain[2] != audit.EventApprovalGranted || chain[3] != audit.EventApprovalGranted {
		t.Errorf("chain %v: want approval.granted per approver, then approval.consumed", chain)
	}
	recs, err := audit.ReadFile(f.log, audit.Filter{RequestID: applied.RequestID})
	if err != nil {
		t.Fatal(err)
	}
	var approvers []any
	for _, r := range recs {
		if r.Event == audit.EventApprovalGranted {
			approvers = append(approvers, r.Fields["approver"])
		}
	}
	if fmt.Sprint(approvers) != "[unit-approver second-approver]" {
		t.Errorf("approval.granted approvers %v", approvers)
	}
	st, err = f.svc.ApprovalStatus(ctx, ApprovalStatusInput{RequestID: first.ApprovalRequest})
	if err != nil || st.Status != "consumed" || st.Approvals != 2 {
		t.Errorf("approval_status after the apply: %+v, %v", st, err)
	}
}
