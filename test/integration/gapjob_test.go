//go:build integration

package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agent-sandbox/agent-sandbox/test/corpus"
)

// TestWebhookNoPodForAJobMadeInAGap: a Job made while the namespace is not under the webhook (an install's
// gap, between an uninstall and a reinstall; here the chart's identity takes the namespace's selector label
// off for a moment) whose Pod the Job controller can only make once the webhook is back. The Job is the
// exact rendering of a call, injected as the webhook would; a ResourceQuota of no Pods, made in the same
// gap and deleted after it, holds its Pod back. Before, CheckPod admitted that Pod, which is exactly the
// Job's template, and recorded it in the Pod ledger, so the kubelet's Vault-audience token followed: for a
// terraform_apply Job, an approval token nobody signed would have run. Now the Job controller's create is
// refused, because the webhook never recorded the Job's admission: the real API server, Job controller and
// webhook.
func TestWebhookNoPodForAJobMadeInAGap(t *testing.T) {
	env := startWebhookEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	defer env.corpus.Cleanup(context.Background())
	ns := env.corpus.Namespace()
	admin := env.corpus.Admin

	restore := env.openGap(t)
	q, err := admin.CoreV1().ResourceQuotas(ns).Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "hold-pods"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// No quota controller runs here: its status is written as the controller writes it.
	q.Status.Hard, q.Status.Used = q.Spec.Hard, corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}
	if _, err := admin.CoreV1().ResourceQuotas(ns).UpdateStatus(ctx, q, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	job, err := admin.BatchV1().Jobs(ns).Create(ctx, env.corpus.Injected("k8s_get_pod_status", corpus.PodParams()), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create the exact Job while the namespace is not under the webhook: %v", err)
	}
	// The Job controller tries, and the quota refuses the Pod, while no webhook looks.
	quotaRefused := waitForJobEvent(t, ctx, env, job.Name, "exceeded quota")
	t.Logf("in the gap: %s", quotaRefused)
	restore()
	if err := admin.CoreV1().ResourceQuotas(ns).Delete(ctx, q.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete the quota once the webhook is back: %v", err)
	}

	refused := waitForJobEvent(t, ctx, env, job.Name, "never admitted Job "+job.Name)
	if !strings.Contains(refused, "owner-job") {
		t.Errorf("the refusal does not name rule owner-job: %s", refused)
	}
	t.Logf("refused: %s", refused)
	pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job.Name})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 0 {
		t.Fatalf("the Job made in the gap has a Pod %s", pods.Items[0].Name)
	}
}

// waitForJobEvent waits for an event on the Job named job whose message contains want (the Job controller's
// FailedCreate carries the refusal of its Pod), and fails the test if a Pod of it is created instead.
func waitForJobEvent(t *testing.T, ctx context.Context, env *webhookEnv, job, want string) string {
	t.Helper()
	ns := env.corpus.Namespace()
	for {
		events, err := env.corpus.Admin.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + job})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range events.Items {
			if strings.Contains(e.Message, want) {
				return e.Reason + ": " + e.Message
			}
		}
		pods, err := env.corpus.Admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job})
		if err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) > 0 {
			t.Fatalf("waiting for an event saying %q on Job %s, its Pod %s was created and admitted", want, job, pods.Items[0].Name)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no event on Job %s says %q (%d events)", job, want, len(events.Items))
		case <-time.After(time.Second):
		}
	}
}
