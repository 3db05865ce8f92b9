package sandbox

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
)

func callJob(requestID string) *batchv1.Job {
	return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "as-tool-x", Namespace: "ns",
		Labels: map[string]string{contract.LabelRequestID: requestID}}}
}

// createLost is a clientset whose first create of a Job is stored (stored) or not, and then answered with err,
// as when the answer of a create that reached the API server is lost.
func createLost(stored bool, err error) *fake.Clientset {
	cs := fake.NewSimpleClientset()
	cs.PrependReactor("create", "jobs", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if stored {
			obj := a.(k8stesting.CreateAction).GetObject()
			if terr := cs.Tracker().Create(schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}, obj, "ns"); terr != nil {
				return true, nil, terr
			}
		}
		return true, nil, err
	})
	return cs
}

func jobThere(t *testing.T, cs *fake.Clientset) bool {
	t.Helper()
	_, err := cs.BatchV1().Jobs("ns").Get(context.Background(), "as-tool-x", metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

// A create whose answer never came back may have created the Job: Run deletes it before it returns, so that
// no Job of an ended call runs on its own (an approved apply, say), and a cancelled call says it was cancelled.
func TestRunDeletesTheJobOfAnUnansweredCreate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		cancel bool
	}{
		{"connection broke", errors.New(`Post "https://10.0.0.1:6443/apis/batch/v1/namespaces/ns/jobs": read: connection reset by peer`), false},
		{"server timed out", apierrors.NewTimeoutError("the request did not complete", 0), false},
		{"call cancelled", context.Canceled, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := createLost(true, tc.err)
			r := NewRunner(cs, "ns", 1)
			r.lateSweep = time.Hour
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancel {
				cs.PrependReactor("create", "jobs", func(k8stesting.Action) (bool, runtime.Object, error) {
					cancel()
					return false, nil, nil
				})
			}
			_, err := r.Run(ctx, callJob("req-1"), nil)
			if err == nil {
				t.Fatal("Run succeeded")
			}
			if jobThere(t, cs) {
				t.Errorf("the Job of the unanswered create (%v) is still there", tc.err)
			}
			if tc.cancel != errors.Is(err, context.Canceled) {
				t.Errorf("error %v: cancelled is %v, want %v", err, errors.Is(err, context.Canceled), tc.cancel)
			}
		})
	}
}

// An API server that refused the create stored nothing: nothing of that name is touched, even a Job there.
func TestRunLeavesJobsAloneAfterARefusal(t *testing.T) {
	for _, refusal := range []error{
		apierrors.NewForbidden(schema.GroupResource{Group: "batch", Resource: "jobs"}, "as-tool-x", errors.New(`admission webhook "jobs.validate.agent-sandbox.dev" denied the request`)),
		apierrors.NewAlreadyExists(schema.GroupResource{Group: "batch", Resource: "jobs"}, "as-tool-x"),
		&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")},
	} {
		cs := createLost(false, refusal)
		if err := cs.Tracker().Add(callJob("req-1")); err != nil {
			t.Fatal(err)
		}
		r := NewRunner(cs, "ns", 1)
		if _, err := r.Run(context.Background(), callJob("req-1"), nil); err == nil {
			t.Fatal("Run succeeded")
		}
		if !jobThere(t, cs) {
			t.Errorf("after %v the Job of that name was deleted", refusal)
		}
	}
}

// The API server may store the Job after the client gave up on the create: it is deleted when it appears. A
// Job of the same name that another call created (an approval's tokens name the Job) is not.
func TestRunDeletesALateJob(t *testing.T) {
	cs := createLost(false, context.DeadlineExceeded)
	r := NewRunner(cs, "ns", 1)
	r.lateSweep = 10 * time.Millisecond
	if _, err := r.Run(context.Background(), callJob("req-1"), nil); err == nil {
		t.Fatal("Run succeeded")
	}
	if err := cs.Tracker().Add(callJob("req-1")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for jobThere(t, cs) {
		if time.Now().After(deadline) {
			t.Fatal("the Job stored after the unanswered create was not deleted")
		}
		time.Sleep(10 * time.Millisecond)
	}

	cs = createLost(false, context.DeadlineExceeded)
	r = NewRunner(cs, "ns", 1)
	r.lateSweep = 10 * time.Millisecond
	if _, err := r.Run(context.Background(), callJob("req-1"), nil); err == nil {
		t.Fatal("Run succeeded")
	}
	if err := cs.Tracker().Add(callJob("req-2")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if !jobThere(t, cs) {
		t.Error("another call's Job of the same name was deleted")
	}
}
