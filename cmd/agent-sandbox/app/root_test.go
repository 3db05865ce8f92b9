package app

import (
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/cli"
)

// runCLI runs the whole command line, as the binary does, with empty standard input.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return cli.MainFunc(Main).Capture(args...)
}

// TestHelpDocumentsExitCodes: every command's --help ends with the exit codes Main uses.
func TestHelpDocumentsExitCodes(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"approvals", "list", "--help"}, {"mcp", "--help"}, {"audit", "verify", "--help"}} {
		code, out, _ := runCLI(t, args...)
		if code != 0 || !strings.HasSuffix(out, cli.ExitCodesHelp) {
			t.Errorf("%v: exit %d, help does not end with the exit codes:\n%s", args, code, out)
		}
	}
	for code, line := range map[int]string{cli.ExitUsage: "  2  usage error", cli.ExitNotFound: "  3  not found", cli.ExitTampered: "  4  tampered"} {
		if !strings.Contains(cli.ExitCodesHelp, line) {
			t.Errorf("exit code %d is not documented as %q", code, line)
		}
	}
	// A usage error exits 2: an unknown flag, an unknown command, a missing argument.
	for _, args := range [][]string{{"--bogus"}, {"bogus"}, {"approvals", "bogus"}, {"approvals", "show"}, {"approve"}, {"mcp", "extra"}} {
		if code, _, stderr := runCLI(t, args...); code != cli.ExitUsage || !strings.HasPrefix(stderr, "error: ") {
			t.Errorf("%v: exit %d, stderr %q", args, code, stderr)
		}
	}
}
