package auditor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/cli"
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

func TestAuditVerify(t *testing.T) {
	t.Setenv(audit.EnvPath, "")
	path := writeAuditLog(t)

	code, out, errOut := testMain.Capture("audit", "verify", "--file", path)
	if code != 0 || !strings.HasPrefix(out, "OK: 6 lines, chain intact (last hash ") || errOut != "" {
		t.Fatalf("verify intact log: code %d, stdout %q, stderr %q", code, out, errOut)
	}

	// The default path comes from the environment.
	t.Setenv(audit.EnvPath, path)
	if code, out, _ := testMain.Capture("audit", "verify"); code != 0 || !strings.HasPrefix(out, "OK: 6 lines") {
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
	code, out, errOut = testMain.Capture("audit", "verify", "--file", path)
	if code != cli.ExitTampered || out != "" || !strings.HasPrefix(errOut, "FAIL: line 3: ") || strings.Count(errOut, "\n") != 1 {
		t.Fatalf("verify tampered log: code %d, stdout %q, stderr %q", code, out, errOut)
	}

	// Several logs: each chain on its own, the broken one named.
	intact := writeAuditLog(t)
	code, out, errOut = testMain.Capture("audit", "verify", "--file", intact, "--file", path)
	if code != cli.ExitTampered || out != "" || !strings.HasPrefix(errOut, "FAIL: "+path+": line 3: ") || strings.Count(errOut, "\n") != 1 {
		t.Fatalf("verify two logs, one tampered: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, out, _ := testMain.Capture("audit", "verify", "--file", intact, "--file", intact); code != cli.ExitUsage {
		t.Fatalf("the same log twice: code %d, stdout %q", code, out)
	}
	code, out, _ = testMain.Capture("audit", "verify", "--file", intact, "-o", "json")
	if code != 0 || !strings.Contains(out, `"verdict": "OK"`) || !strings.Contains(out, `"lines": 6`) {
		t.Fatalf("verify -o json: code %d, stdout %q", code, out)
	}

	code, _, errOut = testMain.Capture("audit", "verify", "--file", filepath.Join(t.TempDir(), "nope.jsonl"))
	if code != cli.ExitNotFound || !strings.Contains(errOut, "does not exist") || strings.Count(errOut, "\n") != 1 {
		t.Fatalf("verify missing log: code %d, stderr %q", code, errOut)
	}
}

func TestAuditShow(t *testing.T) {
	path := writeAuditLog(t)

	code, out, errOut := testMain.Capture("audit", "show", "--file", path, "--request-id", "req-b")
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

	code, out, _ = testMain.Capture("audit", "show", "--file", path, "--json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if code != 0 || out != string(b) {
		t.Fatalf("show --json: code %d, output differs from the file:\n%s", code, out)
	}

	code, _, errOut = testMain.Capture("audit", "show", "--file", filepath.Join(t.TempDir(), "nope.jsonl"))
	if code != cli.ExitNotFound || !strings.Contains(errOut, "does not exist") {
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

	code, out, errOut := testMain.Capture("audit", "verify", "--file", path)
	if code != cli.ExitTampered || out != "" || !strings.HasPrefix(errOut, "FAIL: line 7: line longer than ") {
		t.Fatalf("verify: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = testMain.Capture("audit", "show", "--file", path)
	if code != cli.ExitTampered || strings.Count(out, "req-") != 6 || !strings.Contains(errOut, "line 7: line longer than ") {
		t.Fatalf("show: code %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// anchoredLog writes two complete calls as the MCP server does, reading the chain's head before each
// call's sandbox, and returns the log's path and the anchors the webhook would have recorded.
func anchoredLog(t *testing.T, admitted time.Time) (string, []audit.Anchor) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	now := admitted
	l, err := audit.Open(path, audit.WithClock(func() time.Time { now = now.Add(time.Second); return now }))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var anchors []audit.Anchor
	for _, id := range []string{"req-aaaaaaaaaaaa", "req-bbbbbbbbbbbb"} {
		write := func(name string, fields map[string]any) {
			if err := l.Write(audit.Event{RequestID: id, Name: name, Tool: "kubectl_get", Fields: fields}); err != nil {
				t.Fatal(err)
			}
		}
		write(audit.EventToolRequest, nil)
		write(audit.EventGuardrailDecision, nil)
		head, err := l.Head()
		if err != nil {
			t.Fatal(err)
		}
		a := audit.Anchor{Name: "anchor-" + id, RequestID: id, Head: head, Tool: "kubectl_get", Job: "job-" + id, User: "mcp", Admitted: now, Deadline: time.Minute}
		anchors = append(anchors, a)
		write(audit.EventSandboxStarted, map[string]any{"job": a.Job})
		write(audit.EventToolResult, nil)
	}
	return path, anchors
}

func TestAuditVerifyAgainstCluster(t *testing.T) {
	admitted := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	run := func(t *testing.T, path string, anchors []audit.Anchor, now time.Time, mod func(o *auditVerifyOptions)) (err error, stdout, stderr string) {
		t.Helper()
		var out, errOut bytes.Buffer
		o := &auditVerifyOptions{Files: []string{path}, AgainstCluster: true, Namespace: defaultAnchorNamespace, streams: cli.IO{Out: &out, ErrOut: &errOut},
			now: func() time.Time { return now }, anchors: func(context.Context) ([]audit.Anchor, error) { return anchors, nil }}
		if mod != nil {
			mod(o)
		}
		o.Complete()
		if err := o.Validate(); err != nil {
			t.Fatal(err)
		}
		err = o.Run(context.Background())
		return err, out.String(), errOut.String()
	}
	later := admitted.Add(time.Hour)
	tampered := func(err error) bool { ee, ok := err.(cli.ExitError); return ok && ee.Code == cli.ExitTampered }

	t.Run("intact", func(t *testing.T) {
		path, anchors := anchoredLog(t, admitted)
		err, out, errOut := run(t, path, anchors, later, nil)
		if err != nil || errOut != "" || strings.Count(out, "\n") != 1 ||
			!strings.HasPrefix(out, "OK: 8 lines, chain intact (last hash ") || !strings.HasSuffix(out, "; 2 anchors in agent-sandbox-system: 2 match, 0 do not, 0 in progress, 0 before this log\n") {
			t.Fatalf("err %v, stdout %q, stderr %q", err, out, errOut)
		}
	})
	t.Run("last call cut off", func(t *testing.T) {
		path, anchors := anchoredLog(t, admitted)
		cutLines(t, path, 2)
		err, out, errOut := run(t, path, anchors, later, nil)
		lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
		if !tampered(err) || out != "" || len(lines) != 2 ||
			!strings.HasPrefix(lines[0], "FAIL: call req-bbbbbbbbbbbb (kubectl_get, Job job-req-bbbbbbbbbbbb, admitted 2026-03-04T05:06:") ||
			!strings.Contains(lines[0], "no sandbox.started") || !strings.HasPrefix(lines[1], "FAIL: 6 lines, chain intact") ||
			!strings.HasSuffix(lines[1], ": 1 match, 1 do not, 0 in progress, 0 before this log") {
			t.Fatalf("err %v, stdout %q, stderr %q", err, out, errOut)
		}
	})
	t.Run("in progress", func(t *testing.T) {
		path, anchors := anchoredLog(t, admitted)
		cutLines(t, path, 1)
		err, out, errOut := run(t, path, anchors, anchors[1].Admitted.Add(time.Second), nil)
		if err != nil || errOut != "" || !strings.HasPrefix(out, "IN PROGRESS: call req-bbbbbbbbbbbb") || !strings.Contains(out, "1 match, 0 do not, 1 in progress") {
			t.Fatalf("err %v, stdout %q, stderr %q", err, out, errOut)
		}
	})
	t.Run("since and user leave out anchors", func(t *testing.T) {
		path, anchors := anchoredLog(t, admitted)
		cutLines(t, path, 2)
		old := anchors[1]
		old.Admitted = admitted.Add(-48 * time.Hour)
		err, out, _ := run(t, path, []audit.Anchor{anchors[0], old}, later, func(o *auditVerifyOptions) { o.Since = 24 * time.Hour })
		if err != nil || !strings.Contains(out, "; 1 anchors in agent-sandbox-system, admitted in the last 24h0m0s: 1 match") {
			t.Fatalf("--since: err %v, stdout %q", err, out)
		}
		other := anchors[1]
		other.User = "another-mcp"
		err, out, _ = run(t, path, []audit.Anchor{anchors[0], other}, later, func(o *auditVerifyOptions) { o.User = "mcp" })
		if err != nil || !strings.Contains(out, "made by mcp: 1 match") {
			t.Fatalf("--user: err %v, stdout %q", err, out)
		}
	})
	t.Run("a log rewritten dated ahead, calls run without lines", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "audit.jsonl")
		l, err := audit.Open(path, audit.WithClock(func() time.Time { return time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC) }))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Write(audit.Event{RequestID: "req-decoy", Name: audit.EventToolRequest, Tool: "kubectl_get"}); err != nil {
			t.Fatal(err)
		}
		_ = l.Close()
		hiddenCall := audit.Anchor{Name: "anchor-req-hhhhhhhhhhhh", RequestID: "req-hhhhhhhhhhhh", Head: strings.Repeat("7", 64), Tool: "terraform_apply",
			Job: "job-req-hhhhhhhhhhhh", User: "mcp", Admitted: admitted, Deadline: time.Minute}
		err, out, errOut := run(t, path, []audit.Anchor{hiddenCall}, later, nil)
		if !tampered(err) || out != "" || !strings.HasPrefix(errOut, "FAIL: line 1: dated 2100-01-01T00:00:00Z, more than 5m0s after now") ||
			!strings.Contains(errOut, "FAIL: call req-hhhhhhhhhhhh (terraform_apply, ") || !strings.Contains(errOut, "0 before this log") {
			t.Fatalf("err %v, stdout %q, stderr %q", err, out, errOut)
		}
	})
	t.Run("chain broken", func(t *testing.T) {
		path, anchors := anchoredLog(t, admitted)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(strings.Replace(string(b), `"seq":6`, `"seq":9`, 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		err, out, errOut := run(t, path, anchors, later, nil)
		if !tampered(err) || out != "" || !strings.HasPrefix(errOut, "FAIL: line 6: ") ||
			!strings.Contains(errOut, "FAIL: chain broken at line 6, anchors held against the 5 lines before it; 2 anchors") {
			t.Fatalf("err %v, stdout %q, stderr %q", err, out, errOut)
		}
	})
	t.Run("several logs, text and json", func(t *testing.T) {
		first, a1 := anchoredLog(t, admitted)
		second, a2 := anchoredLog(t, admitted.Add(time.Hour)) // the same request IDs, other lines
		cutLines(t, second, 2)
		anchors := append(a1, a2...)
		later := admitted.Add(3 * time.Hour)
		both := func(o *auditVerifyOptions) { o.Files = []string{first, second} }
		err, out, errOut := run(t, first, anchors, later, both)
		lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
		if !tampered(err) || out != "" || len(lines) != 2 ||
			!strings.HasPrefix(lines[0], "FAIL: "+second+": call req-bbbbbbbbbbbb (kubectl_get, Job job-req-bbbbbbbbbbbb, admitted 2026-03-04T06:06:") ||
			!strings.Contains(lines[0], "no sandbox.started") ||
			lines[1] != "FAIL: 2 logs, 14 lines, every chain intact; 4 anchors in agent-sandbox-system: 3 match, 1 do not, 0 in progress, 0 before this log" {
			t.Fatalf("err %v, stdout %q, stderr %q", err, out, errOut)
		}
		err, out, errOut = run(t, first, anchors, later, func(o *auditVerifyOptions) { both(o); o.Output = "json" })
		var rep verifyJSON
		if jerr := json.Unmarshal([]byte(out), &rep); !tampered(err) || errOut != "" || jerr != nil {
			t.Fatalf("json: err %v (%v), stdout %q, stderr %q", err, jerr, out, errOut)
		}
		if rep.Verdict != "FAIL" || len(rep.Files) != 2 || rep.Files[1].Lines != 6 || rep.Counts == nil || rep.Counts.Total != 4 || rep.Counts.Failed != 1 ||
			len(rep.Results) != 4 || rep.Results[3].Status != "failed" || rep.Results[3].File != second || rep.Results[3].Head != a2[1].Head ||
			rep.Results[0].Status != "ok" || rep.Results[0].File != first || rep.Results[0].HeadLine != 2 {
			t.Fatalf("json: %s", out)
		}
		if err, _, _ := run(t, first, a1, later, func(o *auditVerifyOptions) { o.Output = "json" }); err != nil {
			t.Fatalf("json, intact: %v", err)
		}
	})
	t.Run("a warm claim never stored: VOID with the pool's mark, FAIL without", func(t *testing.T) {
		path, anchors := anchoredLog(t, admitted)
		b := anchors[1]
		warm := audit.Anchor{Name: "anchor-warm", RequestID: b.RequestID, Head: b.Head, Tool: b.Tool, Job: "job-warm", User: b.User, Admitted: b.Admitted,
			Deadline: time.Minute, Pod: "job-warm-x1", PodUID: "0b9c6f0e-1111-4222-8333-444455556666", PodResourceVersion: "42"}
		err, out, errOut := run(t, path, append(anchors, warm), later, nil)
		if !tampered(err) || !strings.Contains(errOut, "FAIL: call req-bbbbbbbbbbbb (kubectl_get, Job job-warm,") || !strings.Contains(errOut, "1 do not") {
			t.Fatalf("without a void: err %v, stdout %q, stderr %q", err, out, errOut)
		}
		warm.Void = &audit.Void{Name: "void-anchor-warm", Anchor: warm.Name, RequestID: warm.RequestID, Job: warm.Job, Head: warm.Head, PodUID: warm.PodUID,
			PodResourceVersion: "42", Evidence: audit.VoidClaimedByAnother, ClaimedBy: "req-cccccccccccc", Voided: b.Admitted.Add(time.Minute)}
		err, out, errOut = run(t, path, append(anchors, warm), later, nil)
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if err != nil || errOut != "" || len(lines) != 2 ||
			!strings.HasPrefix(lines[0], "VOID: call req-bbbbbbbbbbbb (kubectl_get, Job job-warm, admitted 2026-03-04T05:06:") ||
			!strings.Contains(lines[0], "claimed but never stored: the claim of warm Job job-warm never landed (its warm Pod was claimed by req-cccccccccccc") ||
			!strings.HasSuffix(lines[1], "; 3 anchors in agent-sandbox-system: 2 match, 0 do not, 0 in progress, 0 before this log, 1 claimed but never stored (void)") {
			t.Fatalf("with its void: err %v, stdout %q, stderr %q", err, out, errOut)
		}
		err, out, _ = run(t, path, append(anchors, warm), later, func(o *auditVerifyOptions) { o.Output = "json" })
		var rep verifyJSON
		if jerr := json.Unmarshal([]byte(out), &rep); err != nil || jerr != nil {
			t.Fatalf("json: %v, %v: %s", err, jerr, out)
		}
		last := rep.Results[2]
		if rep.Verdict != "OK" || rep.Counts.Void != 1 || rep.Counts.OK != 2 || last.Status != "void" || last.Pod != "job-warm-x1" || last.Void == nil ||
			last.Void.Evidence != "claimed-by-another" || last.Void.ClaimedBy != "req-cccccccccccc" || last.Void.Name != "void-anchor-warm" {
			t.Fatalf("json: %s", out)
		}
	})
	t.Run("no anchors", func(t *testing.T) {
		path, _ := anchoredLog(t, admitted)
		err, out, _ := run(t, path, nil, later, nil)
		if err != nil || !strings.Contains(out, "no anchors in agent-sandbox-system (is that the webhook's namespace") {
			t.Fatalf("err %v, stdout %q", err, out)
		}
	})
	t.Run("cluster unreadable", func(t *testing.T) {
		path, _ := anchoredLog(t, admitted)
		err, _, _ := run(t, path, nil, later, func(o *auditVerifyOptions) {
			o.anchors = func(context.Context) ([]audit.Anchor, error) { return nil, errors.New("forbidden") }
		})
		if err == nil || tampered(err) {
			t.Fatalf("err %v, want a plain failure", err)
		}
	})
	t.Run("flags", func(t *testing.T) {
		if code, _, _ := testMain.Capture("audit", "verify", "--since", "1h"); code != cli.ExitUsage {
			t.Errorf("--since without --against-cluster: exit %d", code)
		}
		code, _, errOut := testMain.Capture("audit", "verify", "--against-cluster", "--file", filepath.Join(t.TempDir(), "nope.jsonl"))
		if code != cli.ExitNotFound || !strings.Contains(errOut, "does not exist") {
			t.Errorf("missing log: exit %d, %q", code, errOut)
		}
	})
}

// cutLines removes the last n lines of the file at path.
func cutLines(t *testing.T, path string, n int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	lines = lines[:len(lines)-1-n]
	if err := os.WriteFile(path, []byte(strings.Join(lines, "")), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestAuditShowEscapesTerminalControls: the audit log holds what the agent sent; audit show prints it with
// the approval screen's escaper, and --json as JSON \u escapes, so ESC, a C1 CSI (U+009B) or a bidi
// override (U+202E) never reaches the terminal raw.
func TestAuditShowEscapesTerminalControls(t *testing.T) {
	t.Setenv(audit.EnvPath, "")
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := audit.Open(path, audit.WithSync(false))
	if err != nil {
		t.Fatal(err)
	}
	const hostile = "a\x1b[2Jb\u009b31mc\u202ed\u2066e\x07f\U000e0041g"
	if err := l.Write(audit.Event{RequestID: "req-" + hostile, Name: audit.EventToolRequest, Tool: "t" + hostile,
		Fields: map[string]any{"params": map[string]any{"p": hostile}, "k" + hostile: hostile}}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), "\u009b") || !strings.Contains(string(raw), "\u202e") {
		t.Fatalf("the test needs the raw characters in the stored line: %s", raw)
	}
	bad := []string{"\x1b", "\u009b", "\u202e", "\u2066", "\x07", "\U000e0041"}
	for _, args := range [][]string{{"audit", "show", "--file", path}, {"audit", "show", "--file", path, "--json"}} {
		code, out, errOut := testMain.Capture(args...)
		if code != 0 || errOut != "" {
			t.Fatalf("%v: code %d, stderr %q", args, code, errOut)
		}
		for _, b := range bad {
			if strings.Contains(out, b) {
				t.Errorf("%v prints %q raw:\n%q", args, b, out)
			}
		}
		if !strings.Contains(out, `\u009b`) || !strings.Contains(out, `\u202e`) {
			t.Errorf("%v: the controls are not shown as escapes:\n%s", args, out)
		}
		if args[len(args)-1] == "--json" {
			var rec audit.Record
			if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &rec); err != nil {
				t.Fatalf("--json is no longer JSON: %v\n%s", err, out)
			}
			if rec.RequestID != "req-"+hostile || rec.Fields["params"].(map[string]any)["p"] != hostile {
				t.Errorf("--json changed the values: %+v", rec)
			}
		}
	}
	// Verify checks the file's own bytes, which show does not touch.
	if code, _, errOut := testMain.Capture("audit", "verify", "--file", path); code != 0 {
		t.Errorf("verify: code %d %s", code, errOut)
	}
}
