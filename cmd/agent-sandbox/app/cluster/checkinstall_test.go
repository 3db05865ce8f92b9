package cluster

import (
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/cli"
)

// TestCheckInstallFlags: check-install refuses a command line it cannot run with (exit 2), before it
// looks for a cluster.
func TestCheckInstallFlags(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "")
	if code, _, stderr := testMain.Capture("check-install"); code != cli.ExitUsage || !strings.Contains(stderr, "--namespace (or $POD_NAMESPACE) is required") {
		t.Errorf("check-install without a namespace: exit %d, %q", code, stderr)
	}
	if code, _, stderr := testMain.Capture("check-install", "--namespace=x", "--port=0", "--timeout=0s"); code != cli.ExitUsage ||
		!strings.Contains(stderr, "--port 0 is not a port") || !strings.Contains(stderr, "--timeout must be positive") {
		t.Errorf("check-install with a bad port and timeout: exit %d, %q", code, stderr)
	}
}
