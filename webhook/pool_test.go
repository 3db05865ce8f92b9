package webhook

import (
	"context"
	"fmt"
	"testing"

	"github.com/go-logr/logr"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
)

// The pool's logic on a fake client (the live pool is proven by make verify and make e2e): it fills a pool
// to min, never past max, and deletes finished warm Jobs and warm Jobs of tools without a pool.
func TestPoolReconcile(t *testing.T) {
	f := newFixture(t)
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	ns := f.p.Spec.Sandbox.Namespace
	// Exactly the warm rendering as admitted, so that only its being finished can get it deleted.
	finished := asServer(t, f.warmJob(t, warmTestTool, "w0000000000f"))
	if !current(f.p, finished) {
		t.Fatal("the finished warm Job is not the current rendering; the test would not isolate finished()")
	}
	finished.ManagedFields, finished.ResourceVersion = nil, ""
	finished.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
	orphan := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "as-terraform-plan-w0000000000b", Namespace: ns, UID: "uid-orphan",
		Labels: map[string]string{contract.LabelTool: "terraform_plan", contract.LabelWarm: "true"}}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(finished, orphan).WithStatusSubresource(&batchv1.Job{}).Build()
	n := 0
	pool := &Pool{Client: c, Policy: func() *policy.Compiled { return f.p }, Log: logr.Discard(),
		NewSuffix: func() (string, error) { n++; return fmt.Sprintf("w%011d", n), nil }}
	tool, _ := f.p.Tool(warmTestTool)

	states, err := pool.Reconcile(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	st := states[warmTestTool]
	if st.Deleted != 1 || st.Created != tool.WarmPool.Min || st.Starting != tool.WarmPool.Min {
		t.Errorf("first pass: %+v, want the finished Job deleted and %d created", st, tool.WarmPool.Min)
	}
	var jobs batchv1.JobList
	if err := c.List(context.Background(), &jobs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs.Items {
		if j.Name == finished.Name || j.Name == orphan.Name {
			t.Errorf("warm Job %s should have been deleted", j.Name)
		}
	}
	// The fake client runs no webhook, so the Job the pool created lacks the injection and the API defaults:
	// it is not the warm rendering as admitted, which is what a warm Job left from an older policy looks like.
	// The pool deletes it and starts a new one, and never exceeds max.
	states, err = pool.Reconcile(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st := states[warmTestTool]; st.Deleted != 1 || st.Created != 1 || st.Starting > tool.WarmPool.Max {
		t.Errorf("second pass: %+v, want the stale Job replaced, at most %d", st, tool.WarmPool.Max)
	}
	if err := c.List(context.Background(), &jobs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(jobs.Items) > tool.WarmPool.Max {
		t.Errorf("%d warm Jobs, more than max %d", len(jobs.Items), tool.WarmPool.Max)
	}
}
