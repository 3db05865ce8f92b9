//go:build e2e

package e2e

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestE2EPreflight: `agent-sandbox preflight` passes every check on the live cluster (Pod Security in the
// tools' target namespaces included), and on the same node brought up without NetworkPolicy enforcement
// (AS_NETPOL=off scripts/up.sh: NetworkPolicies are accepted and nothing drops a packet) it fails, naming
// the networkpolicy check and saying what to install.
func TestE2EPreflight(t *testing.T) {
	cfg := config(t)
	up := os.Getenv("E2E_UP")
	if up == "" {
		t.Fatal("E2E_UP must name the command that (re)starts the local cluster")
	}
	preflight := func() (string, string, error) {
		cmd := exec.Command(cfg.Binary, "preflight", "--policy", cfg.Policy, "--kubeconfig", cfg.AdminKubeconfig)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		return out.String(), errOut.String(), err
	}

	out, errOut, err := preflight()
	t.Logf("preflight on the local cluster:\n%s", out)
	if err != nil {
		t.Fatalf("preflight failed on the local cluster: %v\n%s", err, errOut)
	}
	// pod-security passes because demo-app, the policy's target namespace, enforces baseline (the local
	// cluster's manifest labels it): no --allow-unenforced-namespaces here.
	for _, check := range []string{"pod-security", "runtimeclass", "gvisor", "networkpolicy", "apiserver-egress", "vault-egress", "webhook-reachability"} {
		if !strings.Contains(out, "PASS "+padded(check)) {
			t.Errorf("check %s did not pass", check)
		}
	}

	if o, err := exec.Command("sh", "-c", "AS_NETPOL=off "+up).CombinedOutput(); err != nil {
		t.Fatalf("bring the node up without NetworkPolicy enforcement: %v\n%s", err, o)
	}
	defer func() {
		if o, err := exec.Command("sh", "-c", up).CombinedOutput(); err != nil {
			t.Errorf("turn NetworkPolicy enforcement back on: %v\n%s", err, o)
		}
	}()
	out, errOut, err = preflight()
	t.Logf("preflight without NetworkPolicy enforcement:\n%s%s", out, errOut)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("preflight without enforcement: exit %v, want status 1", err)
	}
	if !strings.Contains(out, "FAIL "+padded("networkpolicy")+"NetworkPolicy is not enforced") ||
		!strings.Contains(out, "install a NetworkPolicy enforcer") {
		t.Errorf("the failure does not name the missing enforcement precisely")
	}
	if !strings.Contains(out, "PASS "+padded("gvisor")) {
		t.Errorf("turning enforcement off changed the gVisor check")
	}
}

// padded matches the text output's name column.
func padded(name string) string { return name + strings.Repeat(" ", 21-len(name)) }
