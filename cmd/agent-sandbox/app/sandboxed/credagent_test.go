package sandboxed

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
)

func TestCredAgentReady(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "kubeconfig")

	code, _, stderr := testMain.Capture("cred-agent", "ready", "--file", path)
	if code != 1 || !strings.HasPrefix(stderr, "cred-agent ready: kubeconfig not ready") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("missing file: code %d, stderr %q", code, stderr)
	}
	if err := os.WriteFile(path, nil, 0o400); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := testMain.Capture("cred-agent", "ready", "--file", path); code != 1 {
		t.Errorf("empty file: code %d", code)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("apiVersion: v1\n"), 0o400); err != nil {
		t.Fatal(err)
	}
	if code, stdout, stderr := testMain.Capture("cred-agent", "ready", "--file", path); code != 0 || stdout != "" || stderr != "" {
		t.Errorf("written file: code %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

func TestCredAgentMissingFlags(t *testing.T) {
	code, stdout, stderr := testMain.Capture("cred-agent", "--vault-addr", "http://127.0.0.1:1")
	if code != 1 || stdout != "" {
		t.Errorf("code %d, stdout %q", code, stdout)
	}
	if !strings.HasPrefix(stderr, "cred-agent: ") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("stderr is not one line starting with cred-agent: %q", stderr)
	}
	for _, want := range []string{"auth role is required", "secrets role is required", "namespace is required", "API server is required"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q: %s", want, stderr)
		}
	}
}

func TestCredAgentBadTokenFile(t *testing.T) {
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := testMain.Capture("cred-agent",
		"--vault-addr", "http://127.0.0.1:1", "--auth-role", "r", "--secrets-role", "s", "--namespace", "n",
		"--api-server", "https://x", "--api-ca-file", ca, "--token-file", filepath.Join(dir, "missing"), "--out", filepath.Join(dir, "kc"))
	if code != 1 || stdout != "" || !strings.HasPrefix(stderr, "cred-agent: read service-account token: ") {
		t.Errorf("code %d stdout %q stderr %q", code, stdout, stderr)
	}
}

func TestOneLineErrorScrubs(t *testing.T) {
	err := &testErr{"first line\nsecond: token=hunter2 eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln"}
	got := oneLineError(nil, err)
	if strings.Contains(got, "\n") || strings.Contains(got, "hunter2") || strings.Contains(got, "eyJ") {
		t.Errorf("oneLineError = %q", got)
	}
}

type testErr struct{ s string }

func (e *testErr) Error() string { return e.s }

// parseOnly stands in for the claim verifier where only waitClaim's waiting is tested.
func parseOnly(_, raw string) (*sandbox.Claim, error) { return sandbox.ParseClaim(raw) }

// waitClaim sees a claim the way the kubelet delivers it: the downward-API file is empty (no claim
// annotation yet), then the kubelet writes a new timestamped folder and swaps the ..data link to it.
func TestWaitClaim(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "claim"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		// The kubelet's atomic writer: a new link, renamed over ..data.
		if err := os.Symlink(name, filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	write("..1", "")
	path := filepath.Join(dir, "claim")
	if err := os.Symlink("..data/claim", path); err != nil {
		t.Fatal(err)
	}

	// No claim: waits until the context ends, then nil without error.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	c, err := waitClaim(ctx, path, 10*time.Millisecond, parseOnly)
	cancel()
	if c != nil || err != nil {
		t.Fatalf("without a claim: %+v, %v; want nil, nil", c, err)
	}

	// Blank text is no claim either; the claim that lands after it is parsed.
	write("..2", "\n")
	claim := `{"requestID":"req-1","tool":"k8s_get_pod_status","namespace":"demo-app","params":{"namespace":"demo-app"},"argv":["/agent-sandbox","run","pod-status"],"auditHead":""}`
	go func() {
		time.Sleep(50 * time.Millisecond)
		write("..3", claim)
	}()
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err = waitClaim(ctx, path, 10*time.Millisecond, parseOnly)
	if err != nil || c == nil {
		t.Fatalf("waitClaim = %+v, %v; want the claim", c, err)
	}
	if c.RequestID != "req-1" || c.Tool != "k8s_get_pod_status" {
		t.Errorf("parsed %+v", c)
	}

	// A claim that does not parse is an error, not a wait.
	write("..4", `{"requestID":"req-1"}`)
	if _, err := waitClaim(ctx, path, 10*time.Millisecond, parseOnly); err == nil {
		t.Error("an incomplete claim was accepted")
	}
}

// TestCredAgentRestartIssuesNothing: a cold Pod's credential agent that the kubelet restarts (a native
// sidecar, killed by OOM or a crash) finds the marker its first start left in the credential volume and
// issues nothing: the first credential's Vault token died with the first process, so a second credential
// would be a second live one nobody revokes. Found in review (2026-12-06): the restart logged in and minted
// again. A start that ends holding nothing valid (its login failed) removes its marker: a restart then tries
// again.
func TestCredAgentRestartIssuesNothing(t *testing.T) {
	dir := t.TempDir()
	ca, token := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "token")
	for _, f := range []string{ca, token} {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"cred-agent", "--vault-addr", "http://127.0.0.1:1", "--auth-role", "r", "--secrets-role", "s", "--namespace", "n",
		"--api-server", "https://x", "--api-ca-file", ca, "--token-file", token, "--out", filepath.Join(dir, "kc"), "--login-timeout", "1s"}
	marker := filepath.Join(dir, issuedMarker)
	code, _, stderr := testMain.Capture(args...)
	if code != 1 || !strings.Contains(stderr, "vault login") {
		t.Fatalf("first start: code %d, stderr %q; want a failed login", code, stderr)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatalf("a start whose login failed left its marker (%v): a restart could not try again", err)
	}
	// As a start killed after it issued leaves it.
	if err := os.WriteFile(marker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = testMain.Capture(args...)
	if code != 1 || !strings.Contains(stderr, "it issues no second credential") || strings.Contains(stderr, "vault login") {
		t.Fatalf("restart: code %d, stderr %q; want it to refuse before any login", code, stderr)
	}
}
