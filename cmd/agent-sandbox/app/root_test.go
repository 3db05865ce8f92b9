package app

import (
	"os"
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

// TestInvalidValuesExitUsage: a flag value a command refuses before doing anything exits 2 as --help says,
// whichever role's command it is (these exited 1 while their commands returned Validate's error as it was).
func TestInvalidValuesExitUsage(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("VAULT_TOKEN", "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"vault", "configure", "--vault-addr", "http://127.0.0.1:1"}, "a Vault token is required"},
		{[]string{"cred-agent", "ready", "--wait", "-1s"}, "--wait must not be negative"},
		{[]string{"keygen", "--key-id", "bad id!", "--out", dir + "/k", "--public-out", dir + "/k.pub"}, "--key-id"},
		{[]string{"keygen", "--out", dir + "/k", "--public-out", dir + "/k"}, "must differ"},
		{[]string{"deny", "req-0123456789ab", "--reason", strings.Repeat("x", 2000)}, "longer than 1024 bytes"},
		{[]string{"audit", "show", "--file", dir + "/a.jsonl", "--request-id", " req-1"}, "surrounding spaces"},
	} {
		code, stdout, stderr := runCLI(t, tc.args...)
		if code != cli.ExitUsage || stdout != "" || !strings.HasPrefix(stderr, "error: ") || !strings.Contains(stderr, tc.want) {
			t.Errorf("%.60q: exit %d, stdout %q, stderr %q; want exit %d and %q", tc.args, code, stdout, stderr, cli.ExitUsage, tc.want)
		}
	}
	// Refusing to overwrite an existing key is not a usage error: the command line is right, the disk is not.
	if err := os.WriteFile(dir+"/exists", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCLI(t, "keygen", "--out", dir+"/exists", "--public-out", dir+"/exists.pub"); code != 1 || !strings.Contains(stderr, "already exists") {
		t.Errorf("keygen over an existing key: exit %d, stderr %q; want exit 1", code, stderr)
	}
}
