package sandbox

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
)

// quotaRace is the error the API server's ResourceQuota admission returns when all its own attempts to
// update the namespace's quota status lost to other creates: the Conflict of the status update, on the
// resourcequotas object.
var quotaRace = apierrors.NewConflict(schema.GroupResource{Resource: "resourcequotas"}, "sandbox",
	errors.New("the object has been modified; please apply your changes to the latest version and try again"))

// createsFailing is a clientset whose creates of resource fail with the errors of fails, in turn, and then
// with a connection error (which ends a run before it follows any Job); it counts the creates.
func createsFailing(resource string, fails ...error) (*fake.Clientset, *atomic.Int32) {
	cs := fake.NewSimpleClientset()
	var n atomic.Int32
	cs.PrependReactor("create", resource, func(k8stesting.Action) (bool, runtime.Object, error) {
		i := int(n.Add(1)) - 1
		if i < len(fails) {
			if fails[i] == nil {
				return false, nil, nil // let the tracker create it
			}
			return true, nil, fails[i]
		}
		return true, nil, errors.New("dial tcp 10.0.0.1:6443: connect: connection refused")
	})
	return cs, &n
}

// A burst of calls makes the ResourceQuota admission lose its races; the Job it refused was admitted and
// nothing was wrong with it. A call without approvals creates it again (a few times); a call with approvals
// does not, since the webhook used them on the refused create and a second one would be a replay: it says so.
func TestJobRefusedOnAQuotaConflict(t *testing.T) {
	job := func(annotations map[string]string) *batchv1.Job {
		return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "j", Namespace: "ns", Annotations: annotations}}
	}
	otherConflict := apierrors.NewConflict(schema.GroupResource{Group: "batch", Resource: "jobs"}, "j", errors.New("changed"))
	for _, tc := range []struct {
		name        string
		job         *batchv1.Job
		fails       []error
		wantCreates int32
		want        error
		says        string
	}{
		{"a conflict, then the API server: created again", job(nil), []error{quotaRace}, 2, ErrClusterDown, ""},
		{"conflicts past the retries", job(nil), []error{quotaRace, quotaRace, quotaRace, quotaRace, quotaRace}, 1 + quotaConflictRetries, ErrQuotaConflict, "resourcequotas"},
		{"a conflict on the Job itself is not the quota's", job(nil), []error{otherConflict}, 1, nil, "jobs.batch"},
		{"with approvals: not created again", job(map[string]string{contract.AnnotationApprovalToken: "a.b.c"}), []error{quotaRace}, 1, ErrQuotaConflict, "ask for a new approval"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs, creates := createsFailing("jobs", tc.fails...)
			r := NewRunner(cs, "ns", 1)
			_, err := r.Run(context.Background(), tc.job, nil)
			if err == nil {
				t.Fatal("run succeeded")
			}
			if got := creates.Load(); got != tc.wantCreates {
				t.Errorf("%d creates, want %d (%v)", got, tc.wantCreates, err)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("error %v, want %v", err, tc.want)
			}
			if tc.want == nil && errors.Is(err, ErrQuotaConflict) {
				t.Errorf("error %v is not a quota conflict", err)
			}
			if !strings.Contains(err.Error(), tc.says) {
				t.Errorf("error %q does not say %q", err, tc.says)
			}
		})
	}
}

// A call's workspace ConfigMap, content-addressed and immutable, is created again after a quota conflict.
func TestWorkspaceRefusedOnAQuotaConflict(t *testing.T) {
	cs, creates := createsFailing("configmaps", quotaRace, nil)
	w := &Workspaces{Client: cs, Namespace: "ns"}
	created, err := w.EnsureWorkspace(context.Background(), "tfws-x", map[string]string{"main.tf": ""})
	if err != nil || !created {
		t.Fatalf("EnsureWorkspace: created %v, %v", created, err)
	}
	if creates.Load() != 2 {
		t.Fatalf("%d creates, want 2", creates.Load())
	}
}
