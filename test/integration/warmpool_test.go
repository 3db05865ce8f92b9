//go:build integration

package integration

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/go-logr/logr"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/warmpool"
	"github.com/agent-sandbox/agent-sandbox/webhook"
)

// TestWarmPoolController: the warm pool's controller-runtime controller against a real kube-apiserver with
// the Job controller and the webhook: it fills the pool to its minimum from an empty namespace (no event to
// start from: its start request), replaces the Job of a warm Pod that is deleted within seconds although
// its resync is an hour away (its watch of warm Pods), and stops creating when its context (its term of
// the Lease) ends.
func TestWarmPoolController(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	w := startWarmCluster(t, ctx)
	cs := w.api.Clientset
	pool := &webhook.Pool{Client: w.direct, ClaimKeys: w.signer.Keys(), Policy: func() *policy.Compiled { return w.p }, Log: logr.Discard()}
	rec := &warmpool.Reconciler{Pool: pool, Interval: time.Hour, Log: logr.Discard()}
	term, endTerm := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- warmpool.Run(term, w.api.Config, w.scheme, rec, w.ns) }()
	defer func() { endTerm(); <-done }()

	want := w.tool.WarmPool.Min
	jobs := func() []string {
		t.Helper()
		list, err := cs.BatchV1().Jobs(w.ns).List(ctx, metav1.ListOptions{LabelSelector: contract.LabelWarm})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, j := range list.Items {
			if j.DeletionTimestamp == nil {
				names = append(names, j.Name)
			}
		}
		sort.Strings(names)
		return names
	}
	waitFor := func(what string, ok func() bool) time.Duration {
		t.Helper()
		start := time.Now()
		for !ok() {
			if ctx.Err() != nil || time.Since(start) > time.Minute {
				t.Fatalf("%s: not within a minute (warm Jobs %v)", what, jobs())
			}
			time.Sleep(100 * time.Millisecond)
		}
		return time.Since(start)
	}
	d := waitFor(fmt.Sprintf("the pool filled to %d", want), func() bool { return len(jobs()) == want })
	first := jobs()
	t.Logf("filled to %d warm Jobs in %s: %v", want, d.Round(time.Millisecond), first)

	// Each warm Job's Pod, made by the Job controller (Pending: no kubelet).
	var pod *corev1.Pod
	waitFor("the first warm Job's Pod", func() bool {
		pods, err := cs.CoreV1().Pods(w.ns).List(ctx, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=" + first[0]})
		if err != nil || len(pods.Items) != 1 {
			return false
		}
		pod = &pods.Items[0]
		return true
	})
	if err := cs.CoreV1().Pods(w.ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	d = waitFor("the deleted warm Pod's Job replaced", func() bool {
		now := jobs()
		return len(now) == want && !contains(now, first[0])
	})
	t.Logf("warm Pod %s deleted: its Job replaced in %s, with the resync an hour away", pod.Name, d.Round(time.Millisecond))

	// The term ends: the controller stops, and a warm Job deleted now is not replaced.
	endTerm()
	if err := <-done; err != nil {
		t.Fatalf("the controller ended with %v", err)
	}
	done <- nil
	now := jobs()
	bg := metav1.DeletePropagationBackground
	if err := cs.BatchV1().Jobs(w.ns).Delete(ctx, now[0], metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if after := jobs(); len(after) != want-1 {
		t.Fatalf("after its term ended the controller still acted: warm Jobs %v (before the delete %v)", after, now)
	}
}
