package warmpool

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/webhook"
)

// TestReconcile: a request runs one pass (here: the empty pool filled to its minimum) and asks for the next
// after the interval; a pass that fails is logged and retried after the interval too, never returned as
// the controller's error (whose back-off could grow past the interval).
func TestReconcile(t *testing.T) {
	p, err := policy.LoadFile("../../policy/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, tl := range p.Spec.Tools {
		if tl.WarmPool != nil {
			want += tl.WarmPool.Min
		}
	}
	if want == 0 {
		t.Fatal("the shipped policy has no warm pool")
	}
	var failList bool
	c := fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if failList {
				return errors.New("the API server is restarting")
			}
			return c.List(ctx, list, opts...)
		},
	}).Build()
	var logged []string
	log := funcr.New(func(_, args string) { logged = append(logged, args) }, funcr.Options{})
	r := &Reconciler{Pool: &webhook.Pool{Client: c, Policy: func() *policy.Compiled { return p }, Log: logr.Discard()}, Interval: 7 * time.Second, Log: log}

	res, err := r.Reconcile(context.Background(), poolRequest)
	if err != nil || res.RequeueAfter != 7*time.Second {
		t.Fatalf("pass: %+v, %v", res, err)
	}
	var jobs batchv1.JobList
	if err := c.List(context.Background(), &jobs); err != nil || len(jobs.Items) != want {
		t.Fatalf("%d warm Jobs after a pass (%v), want %d", len(jobs.Items), err, want)
	}

	failList = true
	res, err = r.Reconcile(context.Background(), poolRequest)
	if err != nil || res.RequeueAfter != 7*time.Second || len(logged) != 1 {
		t.Fatalf("failed pass: %+v, %v, logged %q", res, err, logged)
	}
}
