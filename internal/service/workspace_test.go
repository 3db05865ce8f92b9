package service

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"

	"github.com/agent-sandbox/agent-sandbox/internal/audit"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
)

func (f *fixture) workspaces() *fakeWorkspaces { return f.svc.Workspaces.(*fakeWorkspaces) }

func (w *fakeWorkspaces) state() (published, deleted []string, exists int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.names...), append([]string(nil), w.deleted...), len(w.exists)
}

// TestWorkspaceWaitsForTheSlot: a plan that waits for a concurrency slot publishes nothing, and one cancelled
// while it waits leaves nothing behind.
func TestWorkspaceWaitsForTheSlot(t *testing.T) {
	f := newFixture(t)
	f.run.queue = make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := f.plan(ctx, "k8s-demo")
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	if published, _, _ := f.workspaces().state(); len(published) != 0 {
		t.Fatalf("a call waiting for its slot published %v", published)
	}
	cancel()
	if err := <-done; err == nil || !strings.Contains(err.Error(), "cancelled") {
		t.Fatalf("cancelled while queued: %v", err)
	}
	if published, _, exists := f.workspaces().state(); len(published) != 0 || exists != 0 {
		t.Errorf("a call cancelled in the queue published %v", published)
	}
}

// TestWorkspaceDeletedWhenTheCallDoesNotRun: a call cancelled after it published its workspace, or that
// failed before its Job existed, deletes the ConfigMap it created; a call that ran keeps it, and so does one
// whose ConfigMap was there before it (another call's, or a pending approval's).
func TestWorkspaceDeletedWhenTheCallDoesNotRun(t *testing.T) {
	for _, tc := range []struct {
		name      string
		afterSlot func(ctx context.Context, job *batchv1.Job) (*sandbox.Result, error)
		existed   bool
		deleted   bool
	}{
		{"cancelled while its Job runs", func(_ context.Context, job *batchv1.Job) (*sandbox.Result, error) {
			return &sandbox.Result{JobName: job.Name, ExitCode: -1}, context.Canceled
		}, false, true},
		{"the Job could not be created", func(context.Context, *batchv1.Job) (*sandbox.Result, error) {
			return nil, fmt.Errorf("%w: admission webhook said no", sandbox.ErrDenied)
		}, false, true},
		{"the Job ran and failed", func(_ context.Context, job *batchv1.Job) (*sandbox.Result, error) {
			return &sandbox.Result{JobName: job.Name, ExitCode: -1}, sandbox.ErrDeadline
		}, false, false},
		{"cancelled, but the ConfigMap was there before", func(_ context.Context, job *batchv1.Job) (*sandbox.Result, error) {
			return &sandbox.Result{JobName: job.Name, ExitCode: -1}, context.Canceled
		}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.run.afterSlot = tc.afterSlot
			ws := f.workspaces()
			if tc.existed {
				w, err := f.svc.readWorkspace("k8s-demo")
				if err != nil {
					t.Fatal(err)
				}
				ws.exists = map[string]bool{w.name: true}
			}
			_, err := f.plan(context.Background(), "k8s-demo")
			if err == nil {
				t.Fatal("the call did not fail")
			}
			published, deleted, exists := ws.state()
			if len(published) != 1 {
				t.Fatalf("published %v, want the workspace once", published)
			}
			if got := len(deleted) == 1; got != tc.deleted || (tc.deleted && exists != 0) {
				t.Errorf("deleted %v (%d left), want deleted=%v", deleted, exists, tc.deleted)
			}
			recs, _ := audit.ReadFile(f.log, audit.Filter{})
			var noted bool
			for _, r := range recs {
				noted = noted || (r.Event == EventWorkspaceDeleted && r.Fields["configmap"] == published[0] && r.Fields["deleted"] == true)
			}
			if noted != tc.deleted {
				t.Errorf("workspace.deleted recorded: %v, want %v", noted, tc.deleted)
			}
		})
	}
	// A call that ran keeps its workspace (the pruner removes it when it expires).
	f := newFixture(t)
	_, _ = f.plan(context.Background(), "k8s-demo")
	if published, deleted, _ := f.workspaces().state(); len(published) != 1 || len(deleted) != 0 {
		t.Errorf("a call that ran: published %v, deleted %v", published, deleted)
	}
}

// TestWorkspaceInUseIsKept: the call that created a workspace ConfigMap, cancelled while another call of
// this server uses the same ConfigMap, does not delete it from under that call's Pod.
func TestWorkspaceInUseIsKept(t *testing.T) {
	f := newFixture(t)
	type step struct {
		running chan struct{}
		end     chan error
	}
	steps := make(chan *step, 2)
	f.run.afterSlot = func(_ context.Context, job *batchv1.Job) (*sandbox.Result, error) {
		st := &step{running: make(chan struct{}), end: make(chan error)}
		steps <- st
		close(st.running)
		return &sandbox.Result{JobName: job.Name, ExitCode: -1}, <-st.end
	}
	results := make(chan error, 2)
	plan := func() {
		_, err := f.plan(context.Background(), "k8s-demo")
		results <- err
	}
	go plan()
	creator := <-steps // the first call created the ConfigMap and runs
	<-creator.running
	go plan()
	user := <-steps // the second found it there and runs too
	<-user.running
	creator.end <- context.Canceled // the creator is cancelled
	<-results
	if _, deleted, _ := f.workspaces().state(); len(deleted) != 0 {
		t.Errorf("a cancelled call deleted %v while another call used it", deleted)
	}
	user.end <- errors.New("the tool failed")
	<-results
	if published, _, _ := f.workspaces().state(); len(published) != 2 {
		t.Errorf("published %v, want twice", published)
	}
}
