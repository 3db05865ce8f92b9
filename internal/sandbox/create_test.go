package sandbox

// How the runner handles a create (or claim) that fails: refused on a ResourceQuota update conflict, refused
// for good, or sent and never answered.

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
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

// A call that ended before its Job was sent — cancelled while it waited for a slot, its workspace not
// published, the API server refusing the connection (through the real client and network stack) — says so
// (ErrNotSent: its approvals may be given back); one that was sent, refused or unanswered, does not.
func TestNotSent(t *testing.T) {
	busy := NewRunner(fake.NewSimpleClientset(), "ns", 1)
	busy.sem <- struct{}{}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := busy.Run(ctx, callJob("req-1"), nil); !errors.Is(err, ErrNotSent) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("waiting for a slot: %v", err)
	}
	publish := errors.New("publish the workspace: refused")
	hook := WithBeforeCreate(context.Background(), func(context.Context) error { return publish })
	if _, err := NewRunner(fake.NewSimpleClientset(), "ns", 1).Run(hook, callJob("req-1"), nil); !errors.Is(err, ErrNotSent) || !errors.Is(err, publish) {
		t.Errorf("workspace not published: %v", err)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: "http://" + addr})
	if err != nil {
		t.Fatal(err)
	}
	_, err = NewRunner(cs, "ns", 1).Run(context.Background(), callJob("req-1"), nil)
	if !errors.Is(err, ErrNotSent) || !errors.Is(err, ErrClusterDown) {
		t.Errorf("connection refused: %v", err)
	}

	for _, sent := range []error{
		apierrors.NewForbidden(schema.GroupResource{Group: "batch", Resource: "jobs"}, "as-tool-x", errors.New("denied")),
		errors.New("read: connection reset by peer"),
	} {
		r := NewRunner(createLost(false, sent), "ns", 1)
		r.lateSweep = time.Hour
		if _, err := r.Run(context.Background(), callJob("req-1"), nil); errors.Is(err, ErrNotSent) {
			t.Errorf("sent (%v): %v", sent, err)
		}
	}
}

// A create refused in the mutating phase of admission — the Job mutating webhook denied it or could not be
// called — never reached the validating webhook that records approvals (ApprovalsUnused); one refused or
// failed anywhere later may have used them, and so may a message that only quotes the mutating webhook.
func TestApprovalsUnusedAfterTheMutatingWebhook(t *testing.T) {
	status := func(code int32, reason metav1.StatusReason, msg string) error {
		return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: code, Reason: reason, Message: msg}}
	}
	mutate, validate := strconv.Quote(contract.WebhookMutateJobs), `"jobs.validate.agent-sandbox.dev"`
	for _, tc := range []struct {
		name   string
		err    error
		unused bool
		kind   error
	}{
		{"mutating webhook down", apierrors.NewInternalError(errors.New("failed calling webhook " + mutate + `: failed to call webhook: Post "https://agent-sandbox.agent-sandbox-system.svc:443/mutate-jobs?timeout=10s": dial tcp 10.96.0.12:443: connect: connection refused`)), true, ErrWebhookDown},
		{"mutating webhook denied", status(403, metav1.StatusReasonForbidden, "admission webhook "+mutate+" denied the request: tool x is not in the policy"), true, ErrDenied},
		{"validating webhook down", apierrors.NewInternalError(errors.New("failed calling webhook " + validate + ": failed to call webhook: context deadline exceeded")), false, ErrWebhookDown},
		{"validating webhook denied, quoting the mutating one", status(403, metav1.StatusReasonForbidden, "admission webhook "+validate+" denied the request: failed calling webhook "+mutate+":"), false, ErrDenied},
		{"quota conflict", quotaRace, false, ErrQuotaConflict},
		{"server timeout", apierrors.NewTimeoutError("the request did not complete", 0), false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewRunner(createLost(false, tc.err), "ns", 1)
			r.lateSweep = time.Hour
			_, err := r.Run(context.Background(), callJob("req-1"), nil)
			if err == nil {
				t.Fatal("Run succeeded")
			}
			if got := ApprovalsUnused(err); got != tc.unused {
				t.Errorf("ApprovalsUnused(%v) = %v, want %v", err, got, tc.unused)
			}
			if tc.kind != nil && !errors.Is(err, tc.kind) {
				t.Errorf("error %v is not %v", err, tc.kind)
			}
		})
	}
}

// A connection the API server's side reset (a restart, a proxy dropping it) is the cluster out of reach,
// through the real client and network stack: before, the call said only "create sandbox Job: ... connection
// reset by peer", a failure of no known kind.
func TestCreateOnAResetConnectionIsClusterDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		l.Close() // what comes after the create (the sweep's reads) is refused
		if err != nil {
			return
		}
		_, _ = c.Read(make([]byte, 4096)) // the create went out
		_ = c.(*net.TCPConn).SetLinger(0) // closing now sends a reset
		c.Close()
	}()
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: "http://" + l.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	r := NewRunner(cs, "ns", 1)
	r.lateSweep = time.Hour
	_, err = r.Run(context.Background(), callJob("req-1"), nil)
	if !errors.Is(err, ErrClusterDown) || ApprovalsUnused(err) {
		t.Errorf("create on a reset connection: %v; want ErrClusterDown, approvals possibly used", err)
	}
	t.Logf("the call's error: %v", err)
}
