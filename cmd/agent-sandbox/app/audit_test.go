package app

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/audit"
)

// writeAuditLog writes two requests' events to a fresh log and returns its path.
func writeAuditLog(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	l, err := audit.Open(path, audit.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, id := range []string{"req-a", "req-b"} {
		for _, name := range []string{audit.EventToolRequest, audit.EventGuardrailDecision, audit.EventToolResult} {
			err := l.Write(audit.Event{RequestID: id, Name: name, Tool: "kubectl_get",
				Fields: map[string]any{"namespace": "demo", "token": "hunter2"}})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	return path
}

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Main(context.Background(), args, strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestAuditVerify(t *testing.T) {
	t.Setenv(audit.EnvPath, "")
	path := writeAuditLog(t)

	code, out, errOut := runCLI(t, "audit", "verify", "--file", path)
	if code != 0 || !strings.HasPrefix(out, "OK: 6 lines, chain intact (last hash ") || errOut != "" {
		t.Fatalf("verify intact log: code %d, stdout %q, stderr %q", code, out, errOut)
	}

	// The default path comes from the environment.
	t.Setenv(audit.EnvPath, path)
	if code, out, _ := runCLI(t, "audit", "verify"); code != 0 || !strings.HasPrefix(out, "OK: 6 lines") {
		t.Fatalf("verify via $%s: code %d, stdout %q", audit.EnvPath, code, out)
	}

	// Edit line 3.
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	lines[2] = strings.Replace(lines[2], `"namespace":"demo"`, `"namespace":"kube-system"`, 1)
	if err := os.WriteFile(path, []byte(strings.Join(lines, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runCLI(t, "audit", "verify", "--file", path)
	if code != exitTampered || out != "" || !strings.HasPrefix(errOut, "FAIL: line 3: ") || strings.Count(errOut, "\n") != 1 {
		t.Fatalf("verify tampered log: code %d, stdout %q, stderr %q", code, out, errOut)
	}

	code, _, errOut = runCLI(t, "audit", "verify", "--file", filepath.Join(t.TempDir(), "nope.jsonl"))
	if code != exitNotFound || !strings.Contains(errOut, "does not exist") || strings.Count(errOut, "\n") != 1 {
		t.Fatalf("verify missing log: code %d, stderr %q", code, errOut)
	}
}

func TestAuditShow(t *testing.T) {
	path := writeAuditLog(t)

	code, out, errOut := runCLI(t, "audit", "show", "--file", path, "--request-id", "req-b")
	if code != 0 || errOut != "" {
		t.Fatalf("show: code %d, stderr %q", code, errOut)
	}
	rows := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(rows) != 4 || !strings.HasPrefix(rows[0], "TIME") {
		t.Fatalf("show --request-id req-b: want header and 3 rows, got\n%s", out)
	}
	for _, want := range []string{"2026-03-04T05:06:07Z", "req-b", "guardrail.decision", "kubectl_get", "namespace=demo token=<redacted>"} {
		if !strings.Contains(out, want) {
			t.Errorf("show output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "req-a") || strings.Contains(out, "hunter2") {
		t.Errorf("show output has another request or a secret:\n%s", out)
	}

	code, out, _ = runCLI(t, "audit", "show", "--file", path, "--json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if code != 0 || out != string(b) {
		t.Fatalf("show --json: code %d, output differs from the file:\n%s", code, out)
	}

	code, _, errOut = runCLI(t, "audit", "show", "--file", filepath.Join(t.TempDir(), "nope.jsonl"))
	if code != exitNotFound || !strings.Contains(errOut, "does not exist") {
		t.Fatalf("show missing log: code %d, stderr %q", code, errOut)
	}
}

// TestAuditVerifyAndShowRefuseAHugeLine: a line far over the write bound is named by its number, not
// loaded.
func TestAuditVerifyAndShowRefuseAHugeLine(t *testing.T) {
	t.Setenv(audit.EnvPath, "")
	path := writeAuditLog(t)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(append(bytes.Repeat([]byte("x"), 8<<20), '\n')); err != nil {
		t.Fatal(err)
	}
	f.Close()

	code, out, errOut := runCLI(t, "audit", "verify", "--file", path)
	if code != exitTampered || out != "" || !strings.HasPrefix(errOut, "FAIL: line 7: line longer than ") {
		t.Fatalf("verify: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = runCLI(t, "audit", "show", "--file", path)
	if code != exitTampered || strings.Count(out, "req-") != 6 || !strings.Contains(errOut, "line 7: line longer than ") {
		t.Fatalf("show: code %d, stdout %q, stderr %q", code, out, errOut)
	}
}
