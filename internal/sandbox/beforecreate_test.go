package sandbox

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestBeforeCreateRunsOnceTheCallHoldsItsSlot: the call's hook (publishing its workspace) runs only after
// the call took its concurrency slot and before its Job is created; a call cancelled in the queue never runs
// it, and a hook that fails leaves no Job.
func TestBeforeCreateRunsOnceTheCallHoldsItsSlot(t *testing.T) {
	cs := fake.NewSimpleClientset()
	var hooked, created atomic.Int32
	cs.PrependReactor("create", "jobs", func(k8stesting.Action) (bool, runtime.Object, error) {
		created.Add(1)
		if hooked.Load() == 0 {
			t.Error("the Job was created before the call's hook ran")
		}
		return true, nil, errors.New("connection refused") // end the run here
	})
	r := NewRunner(cs, "ns", 1)
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "j", Namespace: "ns"}}
	hook := func(context.Context) error { hooked.Add(1); return nil }

	r.sem <- struct{}{} // every slot taken
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := r.Run(WithBeforeCreate(ctx, hook), job, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a call cancelled in the queue: %v", err)
	}
	if hooked.Load() != 0 || created.Load() != 0 {
		t.Fatalf("a call cancelled in the queue ran its hook (%d) or created its Job (%d)", hooked.Load(), created.Load())
	}
	<-r.sem

	failing := errors.New("publish failed")
	if _, err := r.Run(WithBeforeCreate(context.Background(), func(context.Context) error { return failing }), job, nil); !errors.Is(err, failing) {
		t.Fatalf("a failing hook: %v", err)
	}
	if created.Load() != 0 {
		t.Fatal("a Job was created although the hook failed")
	}

	if _, err := r.Run(WithBeforeCreate(context.Background(), hook), job, nil); !errors.Is(err, ErrClusterDown) {
		t.Fatalf("run: %v", err)
	}
	if hooked.Load() != 1 || created.Load() != 1 {
		t.Fatalf("hook ran %d times, %d Jobs created; want 1 and 1", hooked.Load(), created.Load())
	}
}
