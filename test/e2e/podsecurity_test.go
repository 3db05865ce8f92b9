//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agent-sandbox/agent-sandbox/internal/podsecurity"
)

// TestE2ETargetNamespacesEnforcePodSecurity: on the live cluster every namespace the policy's tools deploy
// into enforces a Pod Security level (demo-app: baseline, from cluster/manifests/namespaces.yaml), so the
// API server itself refuses a privileged hostPath Pod there whatever credential creates it. The sandbox
// protects the node from the tool; this protects it from what the tool deploys. The Pod is created as a
// server-side dry run: admission runs in full, nothing is stored.
func TestE2ETargetNamespacesEnforcePodSecurity(t *testing.T) {
	cfg := config(t)
	cs := admin(t, cfg.AdminKubeconfig)
	p := livePolicy(t, cfg)
	ctx := context.Background()
	rep, err := podsecurity.Check(ctx, cs.CoreV1().Namespaces(), p.TargetNamespaces())
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Err(); err != nil || len(rep.Missing()) != 0 {
		t.Fatalf("target namespaces %+v: %v", rep.Namespaces, err)
	}
	ns, err := cs.CoreV1().Namespaces().Get(ctx, "demo-app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ns.Labels[podsecurity.EnforceLabel] != "baseline" || ns.Labels["pod-security.kubernetes.io/warn"] != "restricted" ||
		ns.Labels["pod-security.kubernetes.io/audit"] != "restricted" {
		t.Errorf("demo-app labels %v, want enforce=baseline, warn=restricted, audit=restricted", ns.Labels)
	}
	privileged := true
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "e2e-host-level"}, Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "c", Image: "localhost/busybox:agent-sandbox", SecurityContext: &corev1.SecurityContext{Privileged: &privileged},
			VolumeMounts: []corev1.VolumeMount{{Name: "host", MountPath: "/host"}}}},
		Volumes: []corev1.Volume{{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}},
	}}
	_, err = cs.CoreV1().Pods("demo-app").Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `violates PodSecurity "baseline:latest"`) ||
		!strings.Contains(err.Error(), "privileged") || !strings.Contains(err.Error(), "hostPath") {
		t.Errorf("a privileged hostPath Pod in demo-app: %v, want refused by Pod Security baseline", err)
	}
}
