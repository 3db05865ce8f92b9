package audit

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// hostClock is the MCP host's clock in a test: each line one second after the last, and set is where it
// stands (set to any time, as a host's clock can be, or as a server that rewrites its log dates it).
type hostClock struct{ t time.Time }

func (c *hostClock) now() time.Time {
	c.t = c.t.Add(time.Second)
	return c.t
}

// timedCall writes one complete call to l, as the MCP server does, and returns the anchor the webhook
// recorded for it at admitted (the cluster's clock).
func timedCall(t *testing.T, l *Log, id string, admitted time.Time) Anchor {
	t.Helper()
	write := callWriter(t, l, id)
	head := admitCall(t, l, write, demoRequest, allowed)
	a := Anchor{Name: "anchor-" + id, RequestID: id, Head: head, Tool: "kubectl_get", Job: "as-kubectl-get-" + id,
		Admitted: admitted, Deadline: time.Minute}
	write(EventSandboxStarted, map[string]any{"job": a.Job})
	write(EventToolResult, map[string]any{"is_error": false})
	return a
}

// hidden is the anchor of a call a compromised server ran with a made-up head and wrote nothing for.
func hidden(id string, admitted time.Time) Anchor {
	return Anchor{Name: "anchor-" + id, RequestID: id, Head: strings.Repeat("7", 64), Tool: "terraform_apply",
		Job: "as-terraform-apply-" + id, Admitted: admitted, Deadline: time.Minute}
}

// TestVerifyAnchorsLogTimes: a line's time is the untrusted MCP server's word, so a log cannot be put
// after the calls it hides by dating it ahead: no line after the verifier's now, no line going back, a
// log begins no later than the admission of the first call anchored in it, and an anchored call's lines are
// dated when the cluster admitted it. Honest clock skew, old logs and a recovered torn line stay OK.
func TestVerifyAnchorsLogTimes(t *testing.T) {
	t0 := time.Date(2026, 5, 6, 7, 0, 0, 0, time.UTC)
	y2100 := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	skewed := 4 * time.Minute // within the allowance
	type verdict struct {
		brokenLine int    // 0: the log verifies
		broken     string // a part of its reason
		status     map[string]AnchorStatus
		reason     map[string]string
	}
	tests := []struct {
		name string
		// write writes the log with the host's clock and returns the anchors in scope.
		write func(t *testing.T, l *Log, host *hostClock) []Anchor
		now   time.Time
		want  verdict
	}{
		{name: "a fresh chain dated 2100, calls run after it with made-up heads", now: t0.Add(time.Hour),
			write: func(t *testing.T, l *Log, host *hostClock) []Anchor {
				host.t = y2100
				callWriter(t, l, "req-decoy")(EventToolRequest, nil)
				return []Anchor{hidden("req-h1", t0.Add(10*time.Minute)), hidden("req-h2", t0.Add(20*time.Minute))}
			},
			want: verdict{brokenLine: 1, broken: "after now",
				status: map[string]AnchorStatus{"req-h1": AnchorFailed, "req-h2": AnchorFailed},
				reason: map[string]string{"req-h1": "fails verification", "req-h2": "fails verification"}}},
		{name: "line 1 dated 2100, then calls logged with true times", now: y2100.Add(time.Hour),
			write: func(t *testing.T, l *Log, host *hostClock) []Anchor {
				host.t = y2100
				callWriter(t, l, "req-decoy")(EventToolRequest, nil)
				host.t = t0.Add(30 * time.Minute)
				a := timedCall(t, l, "req-a", t0.Add(30*time.Minute+3*time.Second))
				return []Anchor{hidden("req-h1", t0.Add(10*time.Minute)), a}
			},
			want: verdict{brokenLine: 2, broken: "times go back",
				status: map[string]AnchorStatus{"req-h1": AnchorFailed, "req-a": AnchorFailed}}},
		{name: "a log that begins after the first call anchored in it", now: t0.Add(time.Hour),
			write: func(t *testing.T, l *Log, host *hostClock) []Anchor {
				host.t = t0.Add(30 * time.Minute)
				a := timedCall(t, l, "req-a", t0.Add(30*time.Minute-skewed))
				return []Anchor{hidden("req-h1", t0.Add(30*time.Minute-2*time.Minute)), a}
			},
			want: verdict{status: map[string]AnchorStatus{"req-h1": AnchorFailed, "req-a": AnchorOK},
				reason: map[string]string{"req-h1": "no line of this log"}}},
		{name: "an anchored call's request dated long after its admission", now: t0.Add(3 * time.Hour),
			write: func(t *testing.T, l *Log, host *hostClock) []Anchor {
				host.t = t0.Add(2 * time.Hour)
				return []Anchor{timedCall(t, l, "req-a", t0.Add(time.Hour))}
			},
			want: verdict{status: map[string]AnchorStatus{"req-a": AnchorFailed},
				reason: map[string]string{"req-a": "after the call was admitted"}}},
		{name: "an anchored call's sandbox dated long before its admission", now: t0.Add(3 * time.Hour),
			write: func(t *testing.T, l *Log, host *hostClock) []Anchor {
				host.t = t0
				return []Anchor{timedCall(t, l, "req-a", t0.Add(time.Hour))}
			},
			want: verdict{status: map[string]AnchorStatus{"req-a": AnchorFailed},
				reason: map[string]string{"req-a": "before the Job was admitted"}}},

		// Honest logs.
		{name: "the MCP host's clock ahead of the cluster's", now: t0.Add(time.Hour),
			write: func(t *testing.T, l *Log, host *hostClock) []Anchor {
				host.t = t0.Add(skewed)
				a := timedCall(t, l, "req-a", t0.Add(2*time.Second))
				return []Anchor{a, hidden("req-old", t0.Add(-time.Minute))}
			},
			want: verdict{status: map[string]AnchorStatus{"req-a": AnchorOK, "req-old": AnchorBeforeLog}}},
		{name: "the MCP host's clock behind the cluster's and the verifier's", now: t0.Add(time.Second),
			write: func(t *testing.T, l *Log, host *hostClock) []Anchor {
				host.t = t0.Add(-skewed)
				return []Anchor{timedCall(t, l, "req-a", t0)}
			},
			want: verdict{status: map[string]AnchorStatus{"req-a": AnchorOK}}},
		{name: "the verifier's clock behind the MCP host's", now: t0.Add(-skewed),
			write: func(t *testing.T, l *Log, host *hostClock) []Anchor {
				host.t = t0
				return []Anchor{timedCall(t, l, "req-a", t0.Add(2*time.Second))}
			},
			want: verdict{status: map[string]AnchorStatus{"req-a": AnchorOK}}},
		{name: "the host's clock set back a little between calls", now: t0.Add(time.Hour),
			write: func(t *testing.T, l *Log, host *hostClock) []Anchor {
				host.t = t0
				a := timedCall(t, l, "req-a", t0.Add(2*time.Second))
				host.t = t0.Add(-skewed)
				b := timedCall(t, l, "req-b", t0.Add(10*time.Second))
				return []Anchor{a, b}
			},
			want: verdict{status: map[string]AnchorStatus{"req-a": AnchorOK, "req-b": AnchorOK}}},
		{name: "a log begun a year ago, a torn line recovered", now: t0.Add(time.Hour),
			write: func(t *testing.T, l *Log, host *hostClock) []Anchor {
				host.t = t0.AddDate(-1, 0, 0)
				old := timedCall(t, l, "req-old", host.t.Add(2*time.Second))
				appendBytes(t, l.Path(), []byte(`{"seq":9,"ti`))
				host.t = t0
				recovered, err := Open(l.Path(), WithClock(host.now), WithSync(false))
				if err != nil {
					t.Fatal(err)
				}
				defer recovered.Close()
				a := timedCall(t, recovered, "req-a", t0.Add(3*time.Second))
				return []Anchor{old, a, hidden("req-older", t0.AddDate(-2, 0, 0))}
			},
			want: verdict{status: map[string]AnchorStatus{"req-old": AnchorOK, "req-a": AnchorOK, "req-older": AnchorBeforeLog}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			host := &hostClock{t: t0}
			l, path := openAnchored(t, &anchorClock{}, t.TempDir(), "audit.jsonl")
			l.now = host.now
			anchors := tt.write(t, l, host)
			files, rep, err := VerifyFilesAnchors([]string{path}, anchors, tt.now)
			if err != nil {
				t.Fatal(err)
			}
			broken := files[0].Broken
			switch {
			case tt.want.brokenLine == 0 && broken != nil:
				t.Errorf("the log fails verification: %v", broken)
			case tt.want.brokenLine != 0 && (broken == nil || broken.Line != tt.want.brokenLine || !strings.Contains(broken.Reason, tt.want.broken)):
				t.Errorf("verification: %v, want line %d: …%s…", broken, tt.want.brokenLine, tt.want.broken)
			}
			checkAnchorReport(t, rep, byRequestID, tt.want.status, tt.want.reason)
		})
	}
}

// TestVerifyLogTimesWithoutAnchors: the chain alone is also refused with a line dated ahead of the
// verifier or going back, and plain Verify (which has no clock) still refuses times going back.
func TestVerifyLogTimesWithoutAnchors(t *testing.T) {
	t0 := time.Date(2026, 5, 6, 7, 0, 0, 0, time.UTC)
	host := &hostClock{t: t0}
	l, path := openAnchored(t, &anchorClock{}, t.TempDir(), "audit.jsonl")
	l.now = host.now
	timedCall(t, l, "req-a", t0)
	host.t = t0.Add(-time.Hour)
	timedCall(t, l, "req-b", t0)
	files, _, err := VerifyFilesAnchors([]string{path}, nil, t0.Add(2*time.Hour))
	if err != nil || files[0].Broken == nil || files[0].Broken.Line != 5 || !strings.Contains(files[0].Broken.Reason, "times go back") {
		t.Fatalf("VerifyFilesAnchors: %+v, %v", files, err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var verr *VerifyError
	if _, err := Verify(f); !errors.As(err, &verr) || verr.Line != 5 {
		t.Fatalf("Verify: %v", err)
	}
	files, _, err = VerifyFilesAnchors([]string{path}, nil, t0.Add(-time.Hour))
	if err != nil || files[0].Broken == nil || files[0].Broken.Line != 1 || !strings.Contains(files[0].Broken.Reason, "after now") {
		t.Fatalf("verified an hour before the log's first line: %+v, %v", files, err)
	}
}
