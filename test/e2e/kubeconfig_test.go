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

	"github.com/agent-sandbox/agent-sandbox/test/corpus"
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
	if err := corpus.MCPReach(ctx, cs, ns); err != nil {
		t.Error(err)
	}
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}
