package webhook

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
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
	if !current(f.p, finished, f.c.claimKeys()) {
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

	states, err := pool.Sync(context.Background())
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
	states, err = pool.Sync(context.Background())
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

// poolFixture is a pool on a fake client holding objs, and the warm Jobs it holds afterwards.
func poolFixture(t *testing.T, f *fixture, objs ...client.Object) (*Pool, client.WithWatch) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithStatusSubresource(&batchv1.Job{}).Build()
	n := 0
	return &Pool{Client: c, Policy: func() *policy.Compiled { return f.p }, Log: logr.Discard(), ClaimKeys: f.c.claimKeys(),
		Now:       func() time.Time { return f.now },
		NewSuffix: func() (string, error) { n++; return fmt.Sprintf("w%011d", n), nil }}, c
}

// currentWarmJob is a warm Job exactly as admitted (so only its Pod can get it replaced), created at.
func currentWarmJob(t *testing.T, f *fixture, suffix string, created time.Time) *batchv1.Job {
	t.Helper()
	j := asServer(t, f.warmJob(t, warmTestTool, suffix))
	j.ManagedFields, j.ResourceVersion = nil, ""
	j.CreationTimestamp = metav1.NewTime(created)
	if !current(f.p, j, f.c.claimKeys()) {
		t.Fatal("the warm Job is not the current rendering")
	}
	return j
}

func warmJobNames(t *testing.T, c client.Client, ns string) map[string]bool {
	t.Helper()
	var jobs batchv1.JobList
	if err := c.List(context.Background(), &jobs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, j := range jobs.Items {
		names[j.Name] = true
	}
	return names
}

// TestPoolReplacesPodlessJob (issue 22, starvation): a warm Job whose Pod was deleted or evicted never gets
// another (one Pod per Job), so the pool deletes it and starts a replacement in the same pass — unless the
// Pod going away carries a claim (a call's, cleaned up by its server) or the Job is too young to have one.
func TestPoolReplacesPodlessJob(t *testing.T) {
	f := newFixture(t)
	ns := f.p.Spec.Sandbox.Namespace
	// Evicted or deleted: the Pod is going away (its Job-tracking finalizer keeps it visible).
	evicted := currentWarmJob(t, f, "w0000000000a", f.now.Add(-5*time.Minute))
	evictedPod := podOf(t, evicted)
	evictedPod.Name, evictedPod.UID = evicted.Name+"-aaaaa", "pod-uid-evicted"
	evictedPod.Finalizers = []string{batchv1.JobTrackingFinalizer}
	evictedPod.DeletionTimestamp = ptr.To(metav1.NewTime(f.now))
	// Gone: the Job controller counted its Pod, which no longer exists.
	gone := currentWarmJob(t, f, "w0000000000b", f.now.Add(-5*time.Second))
	gone.Status.Failed = 1
	// Never had a Pod (refused), for longer than the grace.
	never := currentWarmJob(t, f, "w0000000000c", f.now.Add(-2*podlessGrace))
	// Just created: its Pod is coming.
	fresh := currentWarmJob(t, f, "w0000000000d", f.now.Add(-time.Second))
	// A claimed Pod going away: a call's.
	claimedJob := currentWarmJob(t, f, "w0000000000e", f.now.Add(-5*time.Minute))
	claimedPod := withClaim(podOf(t, claimedJob), f.claimFor(t, warmTestTool, podParams(), testRequestID, ""))
	claimedPod.Name, claimedPod.UID = claimedJob.Name+"-bbbbb", "pod-uid-claimed"
	claimedPod.Finalizers = []string{batchv1.JobTrackingFinalizer}
	claimedPod.DeletionTimestamp = ptr.To(metav1.NewTime(f.now))

	pool, c := poolFixture(t, f, evicted, evictedPod, gone, never, fresh, claimedJob, claimedPod)
	// The fake client would not store status on create.
	gone.Status.Failed = 1
	if err := c.Status().Update(context.Background(), gone); err != nil {
		t.Fatal(err)
	}
	states, err := pool.Sync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	names := warmJobNames(t, c, ns)
	for _, j := range []*batchv1.Job{evicted, gone, never} {
		if names[j.Name] {
			t.Errorf("warm Job %s without a Pod was kept", j.Name)
		}
	}
	for _, j := range []*batchv1.Job{fresh, claimedJob} {
		if !names[j.Name] {
			t.Errorf("warm Job %s was deleted", j.Name)
		}
	}
	st := states[warmTestTool]
	if st.Deleted != 3 || st.Claimed != 1 || st.Starting < 1 {
		t.Errorf("state %+v, want 3 deleted, 1 claimed, the fresh one starting", st)
	}
	tool, _ := f.p.Tool(warmTestTool)
	if st.Idle+st.Starting < tool.WarmPool.Min && st.Idle+st.Starting+st.Claimed < tool.WarmPool.Max {
		t.Errorf("state %+v: the pool was not refilled in the same pass", st)
	}
}
