package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Secrets in the shapes the patterns of package scrub know.
const (
	testJWT   = "eyJhbGciOiJSUzI1NiIsImtpZCI6IjEifQ.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQifQ.c2lnbmF0dXJlLWJ5dGVz_-x"
	testVault = "hvs.CAESIJ0aB1cD2eF3gH4iJ5kL6mN7oP8qR9sT"
	testPEM   = "-----BEGIN RSA PRIVATE KEY-----\nMIIBOgIBAAJBAKj34GkxFhD90vcNLYLInFEX6Ppy1tPf9Cnzj4p4WGeKLs1Pt8Qu\nKUpRKfFLfRYC9AIKjbJTWit+CqvjWYzvQwECAwEAAQ==\n-----END RSA PRIVATE KEY-----"
)

// testCreds is a struct whose JSON field names make its Token secret.
type testCreds struct {
	User  string `json:"user"`
	Token string `json:"token"`
}

// stepClock returns a clock that starts at a fixed instant and advances one millisecond per call.
func stepClock() func() time.Time {
	var mu sync.Mutex
	t := time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("CET", 3600))
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		t = t.Add(time.Millisecond)
		return t
	}
}

func openLog(t testing.TB, path string, opts ...Option) *Log {
	t.Helper()
	l, err := Open(path, append([]Option{WithClock(stepClock())}, opts...)...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// callChain is the event chain of one tool call (invariant 8).
var callChain = []string{
	EventToolRequest, EventGuardrailDecision, EventApprovalRequested, EventApprovalGranted,
	EventApprovalConsumed, EventSandboxStarted, EventCredentialIssued, EventSandboxCompleted,
	EventCredentialRevoked, EventToolResult,
}

func writeChain(t testing.TB, l *Log, requestID string) {
	t.Helper()
	for i, name := range callChain {
		err := l.Write(Event{RequestID: requestID, Name: name, Tool: "kubectl_get", Fields: map[string]any{"step": i}})
		if err != nil {
			t.Fatalf("Write %s: %v", name, err)
		}
	}
}

func readLines(t testing.TB, path string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.SplitAfter(b, []byte{'\n'})
}

func writeLines(t testing.TB, path string, lines [][]byte) {
	t.Helper()
	if err := os.WriteFile(path, bytes.Join(lines, nil), 0o600); err != nil {
		t.Fatal(err)
	}
}

func verifyFile(t testing.TB, path string) (Summary, error) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return Verify(f)
}

func mustVerify(t testing.TB, path string, lines int) Summary {
	t.Helper()
	sum, err := verifyFile(t, path)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if sum.Lines != lines {
		t.Fatalf("Verify: %d lines, want %d", sum.Lines, lines)
	}
	return sum
}

func TestOpenCreatesPrivateFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state", "agent-sandbox")
	path := filepath.Join(dir, "audit.jsonl")
	openLog(t, path)
	for p, want := range map[string]os.FileMode{dir: 0o700 | os.ModeDir, path: 0o600} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode(), want)
		}
	}
}

func TestLineFormat(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l := openLog(t, path)
	if err := l.Write(Event{RequestID: "req-1", Name: EventToolRequest, Tool: "kubectl_get",
		Fields: map[string]any{"namespace": "demo", "token": "abc"}}); err != nil {
		t.Fatal(err)
	}
	if err := l.Write(Event{RequestID: "req-1", Name: EventToolResult, Tool: "kubectl_get"}); err != nil {
		t.Fatal(err)
	}
	lines := readLines(t, path)
	if len(lines) != 3 || len(lines[2]) != 0 {
		t.Fatalf("want 2 newline-terminated lines, got %q", lines)
	}
	body1 := `{"seq":1,"time":"2026-01-02T02:04:05.001Z","request_id":"req-1","event":"tool.request",` +
		`"tool":"kubectl_get","fields":{"namespace":"demo","token":"<redacted>"},"prev":"` + zeroHash + `"}`
	line1 := strings.TrimSuffix(body1, "}") + `,"hash":"` + sha(body1) + `"}`
	if got := strings.TrimSuffix(string(lines[0]), "\n"); got != line1 {
		t.Errorf("line 1\n got %s\nwant %s", got, line1)
	}
	body2 := `{"seq":2,"time":"2026-01-02T02:04:05.002Z","request_id":"req-1","event":"tool.result",` +
		`"tool":"kubectl_get","fields":{},"prev":"` + sha(line1) + `"}`
	line2 := strings.TrimSuffix(body2, "}") + `,"hash":"` + sha(body2) + `"}`
	if got := strings.TrimSuffix(string(lines[1]), "\n"); got != line2 {
		t.Errorf("line 2\n got %s\nwant %s", got, line2)
	}
	if sum := mustVerify(t, path, 2); sum.LastHash != sha(line2) {
		t.Errorf("LastHash %s, want %s", sum.LastHash, sha(line2))
	}
}

func sha(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func TestChainValid(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l := openLog(t, path)
	writeChain(t, l, "req-1")
	writeChain(t, l, "req-2")
	mustVerify(t, path, 2*len(callChain))

	// Reopening continues the chain.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	writeChain(t, openLog(t, path), "req-3")
	mustVerify(t, path, 3*len(callChain))

	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := Read(f, Filter{RequestID: "req-2"})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(callChain) {
		t.Fatalf("Read: %d records for req-2, want %d", len(recs), len(callChain))
	}
	for i, r := range recs {
		if r.Event != callChain[i] || r.RequestID != "req-2" || r.Seq != int64(len(callChain)+i+1) {
			t.Errorf("record %d: %+v", i, r)
		}
	}
}

func TestVerifyDetectsTampering(t *testing.T) {
	const n = 6
	tests := []struct {
		name     string
		tamper   func(t *testing.T, lines [][]byte) [][]byte
		wantLine int
		wantErr  error
		reason   string // a part of the reason, if set
	}{
		{
			name: "edited middle line",
			tamper: func(_ *testing.T, lines [][]byte) [][]byte {
				lines[2] = bytes.Replace(lines[2], []byte(`"step":2`), []byte(`"step":9`), 1)
				return lines
			},
			wantLine: 3, wantErr: ErrChainBroken,
		},
		{
			name: "edited middle line with recomputed hash",
			tamper: func(t *testing.T, lines [][]byte) [][]byte {
				lines[2] = rehash(t, bytes.Replace(lines[2], []byte(`"step":2`), []byte(`"step":9`), 1))
				return lines
			},
			wantLine: 4, wantErr: ErrChainBroken,
		},
		{
			name: "edited last line",
			tamper: func(_ *testing.T, lines [][]byte) [][]byte {
				lines[n-1] = bytes.Replace(lines[n-1], []byte(`"tool.result"`), []byte(`"tool.resulx"`), 1)
				return lines
			},
			wantLine: n, wantErr: ErrChainBroken,
		},
		{
			name: "edited time",
			tamper: func(_ *testing.T, lines [][]byte) [][]byte {
				lines[0] = bytes.Replace(lines[0], []byte(`"time":"2026`), []byte(`"time":"2025`), 1)
				return lines
			},
			wantLine: 1, wantErr: ErrChainBroken,
		},
		{
			name: "deleted middle line",
			tamper: func(_ *testing.T, lines [][]byte) [][]byte {
				return append(lines[:2:2], lines[3:]...)
			},
			wantLine: 3, wantErr: ErrChainBroken,
		},
		{
			name: "deleted first line",
			tamper: func(_ *testing.T, lines [][]byte) [][]byte {
				return lines[1:]
			},
			wantLine: 1, wantErr: ErrChainBroken,
		},
		{
			name: "swapped lines",
			tamper: func(_ *testing.T, lines [][]byte) [][]byte {
				lines[1], lines[2] = lines[2], lines[1]
				return lines
			},
			wantLine: 2, wantErr: ErrChainBroken,
		},
		{
			name: "bad json in the middle",
			tamper: func(_ *testing.T, lines [][]byte) [][]byte {
				lines[1] = []byte("not json\n")
				return lines
			},
			wantLine: 2, wantErr: ErrChainBroken,
		},
		{
			name: "torn last line",
			tamper: func(_ *testing.T, lines [][]byte) [][]byte {
				return append(lines, []byte(`{"seq":7,"time":"20`))
			},
			wantLine: n + 1, wantErr: ErrTornLine,
		},
		{
			name: "last line not json",
			tamper: func(_ *testing.T, lines [][]byte) [][]byte {
				return append(lines, []byte("{\"seq\":7,\"ti\n"))
			},
			wantLine: n + 1, wantErr: ErrTornLine,
		},
		{
			// encoding/json matches member names case-insensitively and lets the last duplicate win, so this
			// line would read as a sandbox.started where jq and `audit show --json` read a tool.request.
			name: "duplicate member in another case",
			tamper: func(t *testing.T, lines [][]byte) [][]byte {
				lines[n-1] = rehash(t, bytes.Replace(lines[n-1], []byte(`,"tool":`), []byte(`,"Event":"sandbox.started","tool":`), 1))
				return lines
			},
			wantLine: n, wantErr: ErrChainBroken, reason: "not spelled as the writer spells it",
		},
		{
			name: "duplicate member",
			tamper: func(t *testing.T, lines [][]byte) [][]byte {
				lines[n-1] = rehash(t, bytes.Replace(lines[n-1], []byte(`,"tool":`), []byte(`,"request_id":"other","tool":`), 1))
				return lines
			},
			wantLine: n, wantErr: ErrChainBroken, reason: "top-level member given twice",
		},
		{
			name: "duplicate key inside fields",
			tamper: func(t *testing.T, lines [][]byte) [][]byte {
				lines[n-1] = rehash(t, bytes.Replace(lines[n-1], []byte(`"fields":{}`), []byte(`"fields":{"job":"a","job":"b"}`), 1))
				return lines
			},
			wantLine: n, wantErr: ErrChainBroken, reason: "names a key twice",
		},
		{
			name: "unknown member",
			tamper: func(t *testing.T, lines [][]byte) [][]byte {
				lines[4] = rehash(t, bytes.Replace(lines[4], []byte(`{"seq":5,`), []byte(`{"seq":5,"x":1,`), 1))
				return lines
			},
			wantLine: 5, wantErr: ErrChainBroken,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "audit.jsonl")
			l := openLog(t, path, WithSync(false))
			for i := range n - 1 {
				if err := l.Write(Event{RequestID: "r", Name: EventToolRequest, Fields: map[string]any{"step": i}}); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.Write(Event{RequestID: "r", Name: EventToolResult}); err != nil {
				t.Fatal(err)
			}
			mustVerify(t, path, n)
			lines := readLines(t, path)
			writeLines(t, path, tt.tamper(t, lines[:n]))

			_, err := verifyFile(t, path)
			var verr *VerifyError
			if !errors.As(err, &verr) {
				t.Fatalf("Verify: %v, want a *VerifyError", err)
			}
			if verr.Line != tt.wantLine || !errors.Is(err, tt.wantErr) {
				t.Errorf("Verify: %v (line %d, %v), want line %d, %v", err, verr.Line, verr.Err, tt.wantLine, tt.wantErr)
			}
			if !strings.Contains(verr.Reason, tt.reason) {
				t.Errorf("reason %q lacks %q", verr.Reason, tt.reason)
			}
			if _, rerr := ReadFile(path, Filter{}); tt.reason != "" && !errors.As(rerr, &verr) {
				t.Errorf("Read: %v, want it to refuse the line too", rerr)
			}
			if !strings.HasPrefix(err.Error(), fmt.Sprintf("line %d: ", tt.wantLine)) {
				t.Errorf("error %q does not name line %d", err, tt.wantLine)
			}
		})
	}
}

// rehash recomputes a tampered line's own hash, as an attacker who knows the format would.
func rehash(t *testing.T, line []byte) []byte {
	t.Helper()
	line = bytes.TrimSuffix(line, []byte{'\n'})
	i := bytes.LastIndex(line, []byte(hashPrefix))
	if i < 0 {
		t.Fatalf("no hash member in %s", line)
	}
	body := append(bytes.Clone(line[:i]), '}')
	return []byte(string(line[:i]) + hashPrefix + sha(string(body)) + "\"}\n")
}

func TestTornTailRecovery(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l := openLog(t, path)
	writeChain(t, l, "req-1")
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	// A crash mid-write leaves part of a line without its newline.
	torn := []byte(`{"seq":11,"time":"2026-01-02T02:04:05.011Z","request_id":"req-2","event":"tool.req`)
	appendBytes(t, path, torn)
	_, err := verifyFile(t, path)
	var verr *VerifyError
	if !errors.As(err, &verr) || verr.Line != 11 || !errors.Is(err, ErrTornLine) {
		t.Fatalf("Verify torn log: %v, want torn line 11", err)
	}

	l = openLog(t, path)
	mustVerify(t, path, 11)
	recs := readAll(t, path)
	last := recs[len(recs)-1]
	if last.Event != EventRecovered || last.Seq != 11 {
		t.Fatalf("last record %+v, want %s at seq 11", last, EventRecovered)
	}
	wantSum := sha(string(torn))
	if last.Fields[FieldTornBytes] != float64(len(torn)) || last.Fields[FieldTornSHA256] != wantSum {
		t.Errorf("recovered fields %v, want %s=%d %s=%s", last.Fields, FieldTornBytes, len(torn), FieldTornSHA256, wantSum)
	}
	if bytes.Contains(readFile(t, path), torn) {
		t.Error("torn bytes are still in the file")
	}

	// The chain goes on after the recovery.
	writeChain(t, l, "req-2")
	mustVerify(t, path, 21)
}

func TestWriteRecoversTornTailOfAnotherWriter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l := openLog(t, path)
	writeChain(t, l, "req-1")
	appendBytes(t, path, []byte(`{"seq":11,"ti`)) // another process died mid-write
	writeChain(t, l, "req-2")
	mustVerify(t, path, 21)
	if recs := readAll(t, path); recs[10].Event != EventRecovered || recs[11].Event != EventToolRequest {
		t.Fatalf("records 11 and 12: %s, %s", recs[10].Event, recs[11].Event)
	}
}

func TestOpenRefusesForeignFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notes.txt")
	content := []byte("line one\nline two without newline")
	if err := os.WriteFile(path, content, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path); !errors.Is(err, ErrChainBroken) {
		t.Fatalf("Open on a non-audit file: %v, want ErrChainBroken", err)
	}
	if got := readFile(t, path); !bytes.Equal(got, content) {
		t.Fatalf("Open modified a non-audit file: %q", got)
	}
}

// writeConcurrently runs one goroutine per request ID of writers, all at once, each writing n tool.request
// events (i = 0 to n-1) of its request to its Log.
func writeConcurrently(t *testing.T, writers map[string]*Log, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(writers))
	for id, l := range writers {
		wg.Go(func() {
			for i := range n {
				if err := l.Write(Event{RequestID: id, Name: EventToolRequest, Fields: map[string]any{"i": i}}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestConcurrentGoroutines(t *testing.T) {
	const goroutines, perG = 8, 1000
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l := openLog(t, path, WithSync(false))
	writers := map[string]*Log{}
	for g := range goroutines {
		writers[fmt.Sprintf("req-%d", g)] = l
	}
	writeConcurrently(t, writers, perG)
	mustVerify(t, path, goroutines*perG)
	for g := range goroutines {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		recs, err := Read(f, Filter{RequestID: fmt.Sprintf("req-%d", g)})
		f.Close()
		if err != nil || len(recs) != perG {
			t.Fatalf("req-%d: %d records, err %v; want %d", g, len(recs), err, perG)
		}
		for i, r := range recs {
			if r.Fields["i"] != float64(i) {
				t.Fatalf("req-%d: record %d has i=%v: lost or reordered", g, i, r.Fields["i"])
			}
		}
	}
}

// TestTwoWriters simulates two processes: two Logs with their own descriptors on one file, writing at the
// same time. Each must see the other's lines under the flock.
func TestTwoWriters(t *testing.T) {
	const perWriter = 500
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	a := openLog(t, path, WithSync(false))
	b := openLog(t, path, WithSync(false))
	writeConcurrently(t, map[string]*Log{"a": a, "b": b}, perWriter)
	mustVerify(t, path, 2*perWriter)

	// Strict alternation, too: each Write must pick up the line the other just wrote.
	for i := range 10 {
		for _, l := range []*Log{a, b} {
			if err := l.Write(Event{RequestID: "alt", Name: EventToolResult, Fields: map[string]any{"i": i}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	mustVerify(t, path, 2*perWriter+20)
}

func TestSecretsNeverReachTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l := openLog(t, path)
	const tokenValue = "s3cr3t-t0ken-value"
	err := l.Write(Event{
		RequestID: "req-" + testJWT,
		Name:      EventCredentialIssued,
		Tool:      "kubectl_get",
		Fields: map[string]any{
			"token":    tokenValue,
			"lease_id": "kubernetes/creds/ns-reader/abc",
			"output":   "got " + testJWT,
			"nested":   map[string]any{"list": []any{"ca", testPEM, testVault}},
			"struct":   testCreds{User: "bob", Token: tokenValue},
			"header":   "Authorization: Bearer " + tokenValue,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := readFile(t, path)
	for _, secret := range []string{testJWT, "eyJ", testPEM, "MIIBOgIBAAJBAKj34", "BEGIN RSA", testVault, tokenValue} {
		if bytes.Contains(got, []byte(secret)) {
			t.Errorf("file contains %q:\n%s", secret, got)
		}
	}
	if !bytes.Contains(got, []byte("kubernetes/creds/ns-reader/abc")) {
		t.Errorf("lease_id was scrubbed away:\n%s", got)
	}
	mustVerify(t, path, 1)
}

func TestWriteErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l := openLog(t, path)
	if err := l.Write(Event{RequestID: "r"}); !errors.Is(err, ErrInvalidEvent) {
		t.Errorf("Write without a name: %v, want ErrInvalidEvent", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Write(Event{Name: EventToolRequest}); !errors.Is(err, ErrClosed) {
		t.Errorf("Write after Close: %v, want ErrClosed", err)
	}
	mustVerify(t, path, 0)
}

func TestVerifyEmpty(t *testing.T) {
	sum, err := Verify(strings.NewReader(""))
	if err != nil || sum.Lines != 0 || sum.LastHash != zeroHash {
		t.Fatalf("Verify(empty) = %+v, %v", sum, err)
	}
}

func TestVerifyFileAndReadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	writeChain(t, openLog(t, path), "req-1")
	if sum, err := VerifyFile(path); err != nil || sum.Lines != len(callChain) {
		t.Fatalf("VerifyFile = %+v, %v", sum, err)
	}
	recs, err := ReadFile(path, Filter{})
	if err != nil || len(recs) != len(callChain) {
		t.Fatalf("ReadFile: %d records, %v", len(recs), err)
	}
	if _, err := VerifyFile(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("VerifyFile(missing): %v, want ErrNotExist", err)
	}

	// Read returns what it could decode before a torn tail, and names the torn line.
	appendBytes(t, path, []byte(`{"seq":11`))
	recs, err = ReadFile(path, Filter{})
	var verr *VerifyError
	if len(recs) != len(callChain) || !errors.As(err, &verr) || verr.Line != 11 {
		t.Fatalf("ReadFile on a torn log: %d records, %v", len(recs), err)
	}
}

func TestDefaultPath(t *testing.T) {
	home := func() (string, error) { return "/home/u", nil }
	noHome := func() (string, error) { return "", errors.New("no home") }
	tests := []struct {
		name string
		env  map[string]string
		home func() (string, error)
		want string
	}{
		{"explicit", map[string]string{EnvPath: "/var/log/a.jsonl", "XDG_STATE_HOME": "/x"}, home, "/var/log/a.jsonl"},
		{"xdg", map[string]string{"XDG_STATE_HOME": "/x/state"}, home, "/x/state/agent-sandbox/audit.jsonl"},
		{"relative xdg ignored", map[string]string{"XDG_STATE_HOME": "state"}, home, "/home/u/.local/state/agent-sandbox/audit.jsonl"},
		{"home", nil, home, "/home/u/.local/state/agent-sandbox/audit.jsonl"},
		{"nothing", nil, noHome, "audit.jsonl"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := defaultPath(func(k string) string { return tt.env[k] }, tt.home)
			if got != tt.want {
				t.Errorf("defaultPath = %q, want %q", got, tt.want)
			}
		})
	}
}

func appendBytes(t testing.TB, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func readAll(t testing.TB, path string) []Record {
	t.Helper()
	recs, err := ReadFile(path, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func BenchmarkWrite(b *testing.B) {
	for _, durable := range []bool{false, true} {
		b.Run(fmt.Sprintf("sync=%v", durable), func(b *testing.B) {
			l := openLog(b, filepath.Join(b.TempDir(), "audit.jsonl"), WithSync(durable))
			e := Event{RequestID: "req-0123456789", Name: EventSandboxCompleted, Tool: "kubectl_get", Fields: map[string]any{
				"job": "sandbox-kubectl-get-x7k2p", "namespace": "agent-sandbox", "exit_code": 0,
				"duration_ms": 1234, "lease_id": "kubernetes/creds/ns-reader/abc", "token": "t",
				"output": "NAME READY STATUS\nweb-0 1/1 Running\n",
			}}
			b.ReportAllocs()
			for b.Loop() {
				if err := l.Write(e); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestCheckSpace(t *testing.T) {
	l, err := Open(filepath.Join(t.TempDir(), "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.CheckSpace(1); err != nil {
		t.Fatalf("one byte: %v", err)
	}
	if err := l.CheckSpace(1 << 62); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("4 EiB: %v, want ErrNoSpace", err)
	}
}
