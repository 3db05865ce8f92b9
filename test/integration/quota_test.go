//go:build integration

package integration

import (
	"context"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/test/harness"
)

// TestQuotaConflictIsTheAPIServers: the chart puts a ResourceQuota on the sandbox namespace, and the API
// server's ResourceQuota admission writes its status for every object created there. Under a burst of calls
// that write can lose to the quota controller's recount, and the create fails with the Conflict of the
// quota's update, although nothing was wrong with the object (seen in `make bench-cost`'s
// loaded run); the runner creates such an object again (sandbox.Runner, sandbox.Workspaces). Which Conflict
// is the quota's is decided on the error a real kube-apiserver gives for a stale write of a ResourceQuota —
// the admission's own write is such a write — and not on that of another object.
func TestQuotaConflictIsTheAPIServers(t *testing.T) {
	api := harness.StartAPIServer(t)
	cs := api.Clientset
	ctx := context.Background()
	const ns = "quota"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	q, err := cs.CoreV1().ResourceQuotas(ns).Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "sandbox"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourceConfigMaps: resource.MustParse("256")}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stale := q.DeepCopy()
	q.Status.Hard = q.Spec.Hard
	q.Status.Used = corev1.ResourceList{corev1.ResourceConfigMaps: resource.MustParse("1")}
	if _, err := cs.CoreV1().ResourceQuotas(ns).UpdateStatus(ctx, q, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	stale.Status.Used = corev1.ResourceList{corev1.ResourceConfigMaps: resource.MustParse("2")}
	_, err = cs.CoreV1().ResourceQuotas(ns).UpdateStatus(ctx, stale, metav1.UpdateOptions{})
	if !apierrors.IsConflict(err) {
		t.Fatalf("a stale write of the quota's status: %v, want a Conflict", err)
	}
	if !sandbox.QuotaConflict(err) {
		t.Errorf("the API server's Conflict on the quota is not taken for a quota conflict: %#v", err)
	}
	t.Logf("the quota's conflict: %v", err)

	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "j"}, Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}}}
	created, err := cs.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	staleJob := created.DeepCopy()
	created.Labels = map[string]string{"a": "b"}
	if _, err := cs.BatchV1().Jobs(ns).Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	staleJob.Labels = map[string]string{"a": "c"}
	_, err = cs.BatchV1().Jobs(ns).Update(ctx, staleJob, metav1.UpdateOptions{})
	if !apierrors.IsConflict(err) {
		t.Fatalf("a stale write of a Job: %v, want a Conflict", err)
	}
	if sandbox.QuotaConflict(err) {
		t.Errorf("a Conflict on a Job is taken for the quota's: %v", err)
	}
}
