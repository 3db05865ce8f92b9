package sandboxed

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestInProcess(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "agent-sandbox")
	if err := os.Symlink(self, link); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		argv []string
		want bool
	}{
		{"a runner of this binary", []string{self, "run", "pod-status", "--namespace=demo-app"}, true},
		{"the same binary through a link", []string{link, "run", "describe"}, true},
		{"warm itself", []string{self, "run", "warm"}, false},
		{"a flag where the runner goes", []string{self, "run", "--help"}, false},
		{"another subcommand", []string{self, "mcp", "x"}, false},
		{"another program", []string{"/bin/sh", "run", "pod-status"}, false},
		{"a missing program", []string{"/nonexistent/agent-sandbox", "run", "pod-status"}, false},
		{"too short", []string{self, "run"}, false},
	}
	for _, tt := range tests {
		if got := inProcess(tt.argv); got != tt.want {
			t.Errorf("%s: inProcess(%q) = %v, want %v", tt.name, tt.argv, got, tt.want)
		}
	}
}

// runWarm runs `run warm` with a claim whose argv is given, and returns the exit code, stderr and the done
// marker's content.
func runWarm(t *testing.T, argv []string) (int, string, string) {
	t.Helper()
	dir := t.TempDir()
	claim, err := json.Marshal(map[string]any{
		"requestID": "req-test", "tool": "k8s_describe", "namespace": "demo-app",
		"params": map[string]string{"namespace": "demo-app"}, "argv": argv,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kubeconfig"), []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Signed by the webhook's key for this Pod, and argv the rendering of a spec whose template is argv.
	keys, path := writeSignedClaim(t, dir, string(claim), true)
	spec := testClaimSpec("k8s_describe", argv...)
	done := filepath.Join(dir, "done")
	code, _, stderr := testMain.Capture("run", "warm", "--tool=k8s_describe", "--claim-file="+path, "--claim-keys="+keys, "--claim-spec="+spec.String(),
		"--kubeconfig="+filepath.Join(dir, "kubeconfig"), "--done-file="+done, "--deadline=30s", "--idle-timeout=5s")
	marker, err := os.ReadFile(done)
	if err != nil {
		t.Fatalf("no done marker: %v (stderr %q)", err, stderr)
	}
	return code, stderr, string(marker)
}

// A claimed runner of this binary runs in this process; its exit code reaches the done marker and the
// entry point's own exit code, as a child's would.
func TestRunWarmInProcessExitCode(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// describe without its required flags fails as a tool: exit 1, an error result line.
	code, stderr, marker := runWarm(t, []string{self, "run", "describe", "--no-such-flag"})
	if code != 1 || marker != "1" {
		t.Fatalf("exit %d, done marker %q; want 1 and \"1\" (stderr %q)", code, marker, stderr)
	}
	if !strings.Contains(stderr, `msg="tool exited"`) || !strings.Contains(stderr, "in_process=true") {
		t.Errorf("stderr does not log an in-process tool's end: %q", stderr)
	}
	if !strings.Contains(stderr, `"error"`) {
		t.Errorf("the tool's error result line is missing: %q", stderr)
	}
}

// Another program is executed as a child, and its exit code is passed on the same way.
func TestRunWarmChildExitCode(t *testing.T) {
	sh, err := filepathLook("sh")
	if err != nil {
		t.Skip("no sh on this machine")
	}
	code, stderr, marker := runWarm(t, []string{sh, "-c", "exit 3"})
	if code != 3 || marker != "3" {
		t.Fatalf("exit %d, done marker %q; want 3 and \"3\" (stderr %q)", code, marker, stderr)
	}
	if !strings.Contains(stderr, "in_process=false") {
		t.Errorf("stderr does not log a child's end: %q", stderr)
	}
}

func filepathLook(name string) (string, error) {
	for _, d := range []string{"/bin", "/usr/bin"} {
		p := filepath.Join(d, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", os.ErrNotExist
}
