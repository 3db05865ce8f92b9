package service

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	batchv1 "k8s.io/api/batch/v1"

	approvalstore "github.com/agent-sandbox/agent-sandbox/internal/approval/store"
	"github.com/agent-sandbox/agent-sandbox/internal/audit"
)

// replicaOf is a second server over the same approvals database file and audit log file as f's, with
// its own store connection, log handle and runner, and the same cluster (workspaces): what a second
// `agent-sandbox mcp --http` process beside the first sees.
func replicaOf(t *testing.T, f *fixture) (*Service, *fakeRunner) {
	t.Helper()
	store, err := approvalstore.Open(filepath.Join(filepath.Dir(f.log), "approvals.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	log, err := audit.Open(f.log, audit.WithSync(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	run := &fakeRunner{stdout: f.run.stdout}
	svc := &Service{Policy: f.svc.Policy, Approvals: store, Audit: log, Runner: run, Workspaces: f.svc.Workspaces, WorkspaceDir: f.svc.WorkspaceDir, Instance: "replica-b"}
	f.svc.Instance = "replica-a"
	return svc, run
}

// TestApprovalFiledOnOneReplicaIsTakenOnAnother: the approval a call filed on one server is found, once
// granted, by the same call on another server over the same database; when both servers take it at once,
// exactly one runs the apply, and the other is refused or files a new request. The audit log both wrote
// verifies.
func TestApprovalFiledOnOneReplicaIsTakenOnAnother(t *testing.T) {
	f := newFixture(t)
	b, runB := replicaOf(t, f)
	ctx := context.Background()
	plan := strings.Repeat("ef", 32)
	f.svc.Workspaces.(*fakeWorkspaces).plans = map[string][]byte{plan: nil}
	f.run.stdout = func(*batchv1.Job) string {
		return `{"workspace":"k8s-demo","plan_id":"` + plan + `","applied":true,"text":"Apply complete!","summary":{"add":0,"change":1,"destroy":0,"replace":0}}`
	}
	runB.stdout = f.run.stdout
	args := map[string]any{"workspace": "k8s-demo", "plan_id": plan}

	first, err := f.apply(ctx, plan)
	if err != nil || first.Status != StatusApprovalRequired {
		t.Fatalf("replica a, without approval: %+v %v", first, err)
	}
	out, err := b.Call(ctx, "terraform_apply", args, nil)
	if err != nil || out.(*ApplyOutput).ApprovalRequest != first.ApprovalRequest {
		t.Fatalf("replica b did not find the request replica a filed: %+v %v", out, err)
	}
	f.approve(ctx, t, first.ApprovalRequest)

	type result struct {
		out *ApplyOutput
		err error
	}
	results := make([]result, 2)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, svc := range []*Service{f.svc, b} {
		wg.Go(func() {
			<-start
			out, err := svc.Call(ctx, "terraform_apply", args, nil)
			o, _ := out.(*ApplyOutput)
			results[i] = result{o, err}
		})
	}
	close(start)
	wg.Wait()
	applied := 0
	for i, r := range results {
		var se *Error
		switch {
		case r.err == nil && r.out.Status == StatusApplied:
			applied++
		case r.err == nil && r.out.Status == StatusApprovalRequired && r.out.ApprovalRequest != first.ApprovalRequest:
			// It looked after the other had consumed the grant: a new request, for a new approval.
		case errors.As(r.err, &se) && se.Kind == KindApproval:
			// It found the grant, and the other consumed it first.
		default:
			t.Errorf("replica %d: %+v %v", i, r.out, r.err)
		}
	}
	if jobs := len(f.run.jobs) + len(runB.jobs); applied != 1 || jobs != 1 {
		t.Errorf("%d applies and %d Jobs from one approval taken by two replicas at once; want 1 and 1", applied, jobs)
	}
	if _, err := audit.VerifyFile(f.log); err != nil {
		t.Fatalf("the audit log two replicas wrote: %v", err)
	}
}
