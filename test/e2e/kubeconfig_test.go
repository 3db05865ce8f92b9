//go:build e2e

package e2e

import (
	"context"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestKubeconfigRefresh: `agent-sandbox kubeconfig refresh` with the admin kubeconfig writes an MCP
// kubeconfig (mode 0600) whose token, requested for the chart's MCP ServiceAccount, lists Jobs in the
// sandbox namespace and is refused Secrets there and anything in kube-system.
func TestKubeconfigRefresh(t *testing.T) {
	cfg := config(t)
	p := livePolicy(t, cfg)
	ns := p.Spec.Sandbox.Namespace
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "sub", "mcp.kubeconfig")
	cmd := exec.Command(cfg.Binary, "kubeconfig", "refresh", "--kubeconfig", cfg.AdminKubeconfig, "--policy", cfg.Policy,
		"--out", out, "--owner", me.Username, "--duration", "10m")
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubeconfig refresh: %v\n%s", err, stderrOf(err))
	}
	t.Logf("kubeconfig refresh: %s", stdout)
	if !strings.Contains(string(stdout), "wrote "+out) || !strings.Contains(string(stdout), "the token expires ") || jwtRE.Match(stdout) {
		t.Errorf("stdout %q", stdout)
	}
	fi, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}

	cs := admin(t, out)
	ctx := context.Background()
	if _, err := cs.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("list Jobs in %s with the MCP kubeconfig: %v", ns, err)
	}
	if _, err := cs.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("list Secrets in %s: %v, want forbidden", ns, err)
	}
	if _, err := cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("list Pods in kube-system: %v, want forbidden", err)
	}
	if _, err := cs.BatchV1().Jobs("kube-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("list Jobs in kube-system: %v, want forbidden", err)
	}
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}
