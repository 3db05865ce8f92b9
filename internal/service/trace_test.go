package service

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"

	"github.com/agent-sandbox/agent-sandbox/internal/audit"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/telemetry"
	"github.com/agent-sandbox/agent-sandbox/internal/telemetry/telemetrytest"
)

// timedRunner gives fakeRunner's results the timings and credential events a real run reports, and takes
// as long as they say: the credential agent's events carry their times (issued and revoked after the
// run's start), and (as a careless agent might) a token.
type timedRunner struct {
	*fakeRunner
	timings         sandbox.Timings
	issuedAfter     time.Duration
	revokedAfter    time.Duration
	issued, revoked time.Time
}

const traceTestToken = "hvs.CAESIFakeVaultTokenThatMustNeverAppear0123456789"

func (r *timedRunner) RunCall(ctx context.Context, job *batchv1.Job, claim string, progress func(sandbox.Stage, string)) (*sandbox.Result, error) {
	start := time.Now()
	r.issued, r.revoked = start.Add(r.issuedAfter), start.Add(r.revokedAfter)
	res, err := r.fakeRunner.RunCall(ctx, job, claim, progress)
	time.Sleep(r.timings.Total)
	if res != nil {
		res.Timings = r.timings
		res.CredentialEvents = []map[string]any{
			{"event": audit.EventCredentialIssued, "scope": "pod-reader", "service_account": "v-kubernetes-pod-reader-abc", "lease_id": "kubernetes/creds/x/abc",
				"ttl_seconds": 600.0, "token": traceTestToken, "time": r.issued.Format(time.RFC3339Nano)},
			{"event": audit.EventCredentialRevoked, "lease_id": "kubernetes/creds/x/abc", "service_account": "v-kubernetes-pod-reader-abc",
				"time": r.revoked.Format(time.RFC3339Nano)},
		}
	}
	return res, err
}

func TestCallTrace(t *testing.T) {
	f := newFixture(t)
	tr, rec := telemetrytest.New(t)
	f.svc.Tracer = tr
	ms := time.Millisecond
	run := &timedRunner{fakeRunner: f.run,
		timings:     sandbox.Timings{Admission: 10 * ms, PodStart: 20 * ms, Credentials: 5 * ms, Run: 10 * ms, Cleanup: 5 * ms, Total: 50 * ms},
		issuedAfter: 33 * ms, revokedAfter: 44 * ms}
	f.svc.Runner = run

	out, err := f.podStatus(context.Background(), map[string]any{"namespace": "demo-app"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	spans := rec.Spans()
	var names []string
	for _, s := range spans {
		names = append(names, s.Name)
	}
	want := []string{"admission", "pod_start", "credential", "run", "cleanup", "tools/call k8s_get_pod_status"}
	if !slices.Equal(names, want) {
		t.Fatalf("spans %v, want %v", names, want)
	}
	root := spans[len(spans)-1]
	if root.TraceID != telemetry.TraceIDFor(out.RequestID).String() {
		t.Errorf("trace ID %s is not the request ID's (%s)", root.TraceID, out.RequestID)
	}
	for k, v := range map[string]string{"request_id": out.RequestID, "tool": "k8s_get_pod_status", "namespace": "demo-app", "tier": "read",
		"warm": "false", "job": f.run.jobs[0].Name, "exit_code": "0", "outcome": "ok"} {
		if got := root.Attrs["agent_sandbox."+k]; got != v {
			t.Errorf("root %s = %q, want %q", k, got, v)
		}
	}
	if root.Error {
		t.Errorf("a successful call's span has an error status: %s", root.ErrorText)
	}
	for i, s := range spans[:len(spans)-1] {
		if s.ParentID != root.SpanID || s.TraceID != root.TraceID {
			t.Errorf("%s is not a child of the call's span", s.Name)
		}
		if s.Start.Before(root.Start) || s.End.After(root.End) || s.End.Before(s.Start) {
			t.Errorf("%s [%v, %v] is outside the call [%v, %v]", s.Name, s.Start, s.End, root.Start, root.End)
		}
		if i > 0 && s.Start.Before(spans[i-1].Start) {
			t.Errorf("%s starts before %s", s.Name, spans[i-1].Name)
		}
	}
	adm, pod, cred, runSpan := spans[0], spans[1], spans[2], spans[3]
	if d := adm.End.Sub(adm.Start); d != 10*ms {
		t.Errorf("admission lasted %v", d)
	}
	if d := pod.End.Sub(pod.Start); d != 20*ms || !pod.Start.Equal(adm.End) {
		t.Errorf("pod_start lasted %v from %v", d, pod.Start)
	}
	if d := runSpan.End.Sub(runSpan.Start); d != 10*ms {
		t.Errorf("run lasted %v", d)
	}
	// The credential's life is the agent's: from its issue to its revoke.
	if !cred.Start.Equal(run.issued) || !cred.End.Equal(run.revoked) {
		t.Errorf("credential span [%v, %v], want the agent's issue and revoke [%v, %v]", cred.Start, cred.End, run.issued, run.revoked)
	}
	if len(cred.Events) != 2 || cred.Events[0].Name != audit.EventCredentialIssued || cred.Events[1].Name != audit.EventCredentialRevoked ||
		cred.Events[0].Attrs["agent_sandbox.scope"] != "pod-reader" || cred.Events[0].Attrs["agent_sandbox.service_account"] != "v-kubernetes-pod-reader-abc" {
		t.Errorf("credential events %+v", cred.Events)
	}
	if all := rec.String(); strings.Contains(all, traceTestToken) || strings.Contains(all, "lease_id") {
		t.Errorf("the trace carries the credential agent's token or lease: %s", all)
	}
}

// TestCallTraceInstantRun: a tool that ran between two reads of its Pod (a run measured as zero) still has a
// run span — the e2e suite once found a cold call's trace without one.
func TestCallTraceInstantRun(t *testing.T) {
	f := newFixture(t)
	tr, rec := telemetrytest.New(t)
	f.svc.Tracer = tr
	ms := time.Millisecond
	f.svc.Runner = &timedRunner{fakeRunner: f.run,
		timings:     sandbox.Timings{Admission: 10 * ms, PodStart: 20 * ms, Credentials: 5 * ms, Cleanup: 5 * ms, Total: 40 * ms},
		issuedAfter: 33 * ms, revokedAfter: 36 * ms}
	if _, err := f.podStatus(context.Background(), map[string]any{"namespace": "demo-app"}, nil); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range rec.Spans() {
		names = append(names, s.Name)
	}
	if !slices.Contains(names, "run") {
		t.Errorf("spans %v: no run span for a tool that ran", names)
	}
}

func TestRefusedCallTrace(t *testing.T) {
	f := newFixture(t)
	tr, rec := telemetrytest.New(t)
	f.svc.Tracer = tr
	_, err := f.podStatus(context.Background(), map[string]any{"namespace": "kube-system"}, nil)
	var se *Error
	if !errors.As(err, &se) {
		t.Fatal(err)
	}
	spans := rec.Spans()
	if len(spans) != 1 {
		t.Fatalf("a refused call made %d spans, want only the call's", len(spans))
	}
	root := spans[0]
	if root.TraceID != telemetry.TraceIDFor(se.RequestID).String() || root.Attrs["agent_sandbox.outcome"] != "denied" ||
		!root.Error || root.ErrorText != se.Message {
		t.Errorf("refused call's span: %+v", root)
	}
}

func TestApprovalTrace(t *testing.T) {
	f := newFixture(t)
	tr, rec := telemetrytest.New(t)
	f.svc.Tracer = tr
	ctx := context.Background()
	plan := strings.Repeat("ab", 32)
	f.svc.Workspaces.(*fakeWorkspaces).plans = map[string][]byte{plan: nil}
	f.run.stdout = func(*batchv1.Job) string {
		return `{"workspace":"k8s-demo","plan_id":"` + plan + `","applied":true,"text":"Apply complete!","summary":{"add":1,"change":0,"destroy":0,"replace":0}}`
	}
	first, err := f.apply(ctx, plan)
	if err != nil || first.Status != StatusApprovalRequired {
		t.Fatalf("%+v, %v", first, err)
	}
	pending := rec.Spans()
	if len(pending) != 1 || pending[0].Attrs["agent_sandbox.outcome"] != string(KindApprovalRequired) || pending[0].Error ||
		len(pending[0].Events) != 1 || pending[0].Events[0].Name != audit.EventApprovalRequested {
		t.Fatalf("approval-required call's trace: %+v", pending)
	}

	tok := f.approve(ctx, t, first.ApprovalRequest)
	applied, err := f.apply(ctx, plan)
	if err != nil || applied.Status != StatusApplied {
		t.Fatalf("%+v, %v", applied, err)
	}
	spans := rec.Spans()
	root := spans[len(spans)-1]
	if root.Attrs["agent_sandbox.outcome"] != OutcomeOK || root.Attrs["agent_sandbox.tier"] == "" {
		t.Errorf("applied call's span: %+v", root)
	}
	if len(root.Events) != 1 || root.Events[0].Name != audit.EventApprovalConsumed || root.Events[0].Attrs["agent_sandbox.approval_request"] != first.ApprovalRequest {
		t.Errorf("the consumed approval is not on the call's span: %+v", root.Events)
	}
	if strings.Contains(rec.String(), tok) || strings.Contains(rec.String(), tok[:40]) {
		t.Error("the approval token reached the trace")
	}
}
