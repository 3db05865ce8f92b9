package audit

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/sha256hex"
)

// anchorClock is a clock that advances one second per call, from anchorT0.
type anchorClock struct{ t time.Time }

var anchorT0 = time.Date(2026, 5, 6, 7, 0, 0, 0, time.UTC)

func (c *anchorClock) now() time.Time {
	c.t = c.t.Add(time.Second)
	return c.t
}

// callWriter returns what writes one event of call id (tool kubectl_get) to l, as the MCP server does.
func callWriter(t *testing.T, l *Log, id string) func(name string, fields map[string]any) {
	t.Helper()
	return func(name string, fields map[string]any) {
		t.Helper()
		if err := l.Write(Event{RequestID: id, Name: name, Tool: "kubectl_get", Fields: fields}); err != nil {
			t.Fatal(err)
		}
	}
}

// admitCall writes a call's tool.request and guardrail.decision, with these fields, and returns the head
// the server then sends with the Job (or the claim), which the webhook anchors.
func admitCall(t *testing.T, l *Log, write func(string, map[string]any), request, decision map[string]any) string {
	t.Helper()
	write(EventToolRequest, request)
	write(EventGuardrailDecision, decision)
	head, err := l.Head()
	if err != nil {
		t.Fatal(err)
	}
	return head
}

// demoRequest and allowed are the fields of an allowed call's first two events.
var (
	demoRequest = map[string]any{"params": map[string]any{"namespace": "demo"}}
	allowed     = map[string]any{"decision": "allow"}
)

// anchoredCall writes one call as the MCP server does and returns the anchor the webhook records for it:
// tool.request and guardrail.decision, then the head is read and sent with the Job, then the sandbox
// events and, when finished, tool.result.
func anchoredCall(t *testing.T, l *Log, clock *anchorClock, id string, finished bool) Anchor {
	t.Helper()
	write := callWriter(t, l, id)
	head := admitCall(t, l, write, demoRequest, allowed)
	a := Anchor{Name: "anchor-" + id, RequestID: id, Head: head, Tool: "kubectl_get", Job: "as-kubectl-get-" + id,
		Admitted: clock.now(), Deadline: time.Minute}
	write(EventSandboxStarted, map[string]any{"job": a.Job})
	write(EventCredentialIssued, map[string]any{"lease": "l"})
	if finished {
		write(EventSandboxCompleted, map[string]any{"job": a.Job, "exit_code": 0})
		write(EventCredentialRevoked, map[string]any{"lease": "l"})
		write(EventToolResult, map[string]any{"is_error": false})
	}
	return a
}

// anchoredCallRecovered writes a call whose server died after its Job was admitted and before it wrote
// sandbox.started, then the tool.result with which the next server closed it (deleting the Job when
// deleted is set).
func anchoredCallRecovered(t *testing.T, l *Log, clock *anchorClock, id string, deleted bool) Anchor {
	t.Helper()
	write := callWriter(t, l, id)
	head := admitCall(t, l, write, nil, nil)
	a := Anchor{Name: "anchor-" + id, RequestID: id, Head: head, Tool: "kubectl_get", Job: "as-kubectl-get-" + id, Admitted: clock.now(), Deadline: time.Minute}
	jobs := []string{}
	if deleted {
		jobs = append(jobs, a.Job)
	}
	write(EventToolResult, map[string]any{"is_error": true, FieldAbandoned: true, FieldJobsDeleted: jobs})
	return a
}

// anchoredCallCreateFailed writes a call whose Job the webhook admitted and anchored, and whose create the API
// server then refused: the call ends with a tool.result naming failedJob as a Job whose create failed.
func anchoredCallCreateFailed(t *testing.T, l *Log, clock *anchorClock, id, failedJob string) Anchor {
	t.Helper()
	write := callWriter(t, l, id)
	head := admitCall(t, l, write, demoRequest, allowed)
	a := Anchor{Name: "anchor-" + id, RequestID: id, Head: head, Tool: "kubectl_get", Job: "as-kubectl-get-" + id, Admitted: clock.now(), Deadline: time.Minute}
	write(EventToolResult, map[string]any{"is_error": true, "kind": "failed", FieldJobsCreateFailed: []string{failedJob}})
	return a
}

// rechain makes lines a valid chain again after they were edited or some were deleted, as an attacker
// who knows the format would: every seq, prev and hash recomputed.
func rechain(t *testing.T, lines [][]byte) [][]byte {
	t.Helper()
	out := make([][]byte, 0, len(lines))
	prev := zeroHash
	for i, raw := range lines {
		rec, err := decodeRecord(bytes.TrimSuffix(raw, []byte{'\n'}))
		if err != nil {
			t.Fatal(err)
		}
		line, err := encodeLine(lineBody{Seq: int64(i + 1), Time: rec.Time.Format(time.RFC3339Nano), RequestID: rec.RequestID,
			Event: rec.Event, Tool: rec.Tool, Fields: rec.Fields, Prev: prev})
		if err != nil {
			t.Fatal(err)
		}
		prev = sha256hex.Of(line)
		out = append(out, append(line, '\n'))
	}
	return out
}

// recordsOf decodes lines; unless broken, they must form a valid chain.
func recordsOf(t *testing.T, lines [][]byte, broken bool) []Record {
	t.Helper()
	data := bytes.Join(lines, nil)
	if _, err := Verify(bytes.NewReader(data)); (err != nil) != broken {
		t.Fatalf("the test's log verifies with %v, want broken=%v", err, broken)
	}
	recs, err := Read(bytes.NewReader(data), Filter{})
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// openAnchored opens the log name in dir with clock, unsynced, closed when the test ends, and returns it
// with its path.
func openAnchored(t *testing.T, clock *anchorClock, dir, name string) (*Log, string) {
	t.Helper()
	path := filepath.Join(dir, name)
	l, err := Open(path, WithClock(clock.now), WithSync(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, path
}

// checkAnchorReport checks rep against the status and a part of the reason wanted for each anchor, named
// by key: one result each, every reason one line, and counts that add up to the results.
func checkAnchorReport(t *testing.T, rep AnchorReport, key func(Anchor) string, want map[string]AnchorStatus, reason map[string]string) {
	t.Helper()
	if len(rep.Results) != len(want) {
		t.Fatalf("%d results, want %d", len(rep.Results), len(want))
	}
	counts := map[AnchorStatus]int{}
	for _, r := range rep.Results {
		k := key(r.Anchor)
		counts[r.Status]++
		if w := want[k]; r.Status != w {
			t.Errorf("%s: %s (%s), want %s", k, r.Status, r.Reason, w)
		}
		if w := reason[k]; !strings.Contains(r.Reason, w) {
			t.Errorf("%s: reason %q lacks %q", k, r.Reason, w)
		}
		if r.Reason == "" || strings.ContainsAny(r.Reason, "\n") {
			t.Errorf("%s: reason %q is not one line", k, r.Reason)
		}
	}
	if rep.OK != counts[AnchorOK] || rep.Failed != counts[AnchorFailed] || rep.InProgress != counts[AnchorInProgress] ||
		rep.BeforeLog != counts[AnchorBeforeLog] || rep.Void != counts[AnchorVoid] {
		t.Errorf("counts %+v do not match the results %v", rep, counts)
	}
}

func byRequestID(a Anchor) string { return a.RequestID }
func byName(a Anchor) string      { return a.Name }

// without returns lines without those of request id.
func without(lines [][]byte, id string) [][]byte {
	var out [][]byte
	for _, l := range lines {
		if !bytes.Contains(l, []byte(`"request_id":"`+id+`"`)) {
			out = append(out, l)
		}
	}
	return out
}

func TestVerifyAnchors(t *testing.T) {
	clock := &anchorClock{t: anchorT0}
	l, path := openAnchored(t, clock, t.TempDir(), "audit.jsonl")
	a := anchoredCall(t, l, clock, "req-aaaaaaaaaaaa", true)
	b := anchoredCall(t, l, clock, "req-bbbbbbbbbbbb", true)
	c := anchoredCall(t, l, clock, "req-cccccccccccc", true)
	log := readLines(t, path)
	log = log[:len(log)-1] // the empty tail after the last '\n'
	if len(log) != 21 {
		t.Fatalf("%d lines, want 21", len(log))
	}
	later := clock.t.Add(time.Hour) // every deadline has passed

	// A fourth call, still running, in a copy of the log.
	d := anchoredCall(t, l, clock, "req-dddddddddddd", false)
	running := readLines(t, path)
	running = running[:len(running)-1]

	// A server killed after f's Job was admitted but before it wrote sandbox.started; the next server
	// deleted the Job and closed the call. g's recovery deleted no Job.
	f := anchoredCallRecovered(t, l, clock, "req-ffffffffffff", true)
	g := anchoredCallRecovered(t, l, clock, "req-gggggggggggg", false)
	recovered := readLines(t, path)
	recovered = recovered[:len(recovered)-1]

	// h's Job was admitted and anchored, and the API server refused to store it (a ResourceQuota, a webhook
	// replica killed as it answered): the call ended naming it. i's call names another Job so.
	h := anchoredCallCreateFailed(t, l, clock, "req-hhhhhhhhhhhh", "as-kubectl-get-req-hhhhhhhhhhhh")
	i := anchoredCallCreateFailed(t, l, clock, "req-iiiiiiiiiiii", "as-other")
	createFailed := readLines(t, path)
	createFailed = createFailed[:len(createFailed)-1]

	// A rotated log: a new file, begun after a, b and c were admitted, with one call e.
	l2, rotated := openAnchored(t, clock, t.TempDir(), "audit.jsonl")
	e := anchoredCall(t, l2, clock, "req-eeeeeeeeeeee", true)
	rotatedLog := readLines(t, rotated)
	rotatedLog = rotatedLog[:len(rotatedLog)-1]

	type want map[string]AnchorStatus
	tests := []struct {
		name    string
		lines   [][]byte
		broken  bool // the chain itself is broken (Verify finds that)
		anchors []Anchor
		now     time.Time
		want    want
		reason  map[string]string // a word the reason must contain
	}{
		{name: "intact", lines: log, anchors: []Anchor{a, b, c}, now: later,
			want: want{a.RequestID: AnchorOK, b.RequestID: AnchorOK, c.RequestID: AnchorOK}},
		{name: "truncated: the last call cut off", lines: log[:14], anchors: []Anchor{a, b, c}, now: later,
			want:   want{a.RequestID: AnchorOK, b.RequestID: AnchorOK, c.RequestID: AnchorFailed},
			reason: map[string]string{c.RequestID: "cut off the end"}},
		{name: "truncated: the last call's result cut off", lines: log[:18], anchors: []Anchor{a, b, c}, now: later,
			want:   want{a.RequestID: AnchorOK, b.RequestID: AnchorOK, c.RequestID: AnchorFailed},
			reason: map[string]string{c.RequestID: "no tool.result"}},
		{name: "truncated: the last line cut off", lines: log[:20], anchors: []Anchor{a, b, c}, now: later,
			want:   want{a.RequestID: AnchorOK, b.RequestID: AnchorOK, c.RequestID: AnchorFailed},
			reason: map[string]string{c.RequestID: "no tool.result"}},
		{name: "truncated in the middle: a call deleted, the chain after it rewritten", lines: rechain(t, without(log, b.RequestID)),
			anchors: []Anchor{a, b, c}, now: later,
			want:   want{a.RequestID: AnchorOK, b.RequestID: AnchorFailed, c.RequestID: AnchorFailed},
			reason: map[string]string{b.RequestID: "no line of this log", c.RequestID: "no line of this log"}},
		{name: "a call's lines after its head deleted, the chain rewritten", lines: rechain(t, append(append([][]byte{}, log[:9]...), log[14:]...)),
			anchors: []Anchor{a, b}, now: later,
			want:   want{a.RequestID: AnchorOK, b.RequestID: AnchorFailed},
			reason: map[string]string{b.RequestID: "no sandbox.started"}},
		{name: "whole chain rewritten with valid hashes", lines: rechain(t, append([][]byte{
			bytes.Replace(log[0], []byte(`"demo"`), []byte(`"kube-system"`), 1)}, log[1:]...)),
			anchors: []Anchor{a, b, c}, now: later,
			want: want{a.RequestID: AnchorFailed, b.RequestID: AnchorFailed, c.RequestID: AnchorFailed}},
		{name: "line edited", lines: append(append(append([][]byte{}, log[:8]...),
			bytes.Replace(log[8], []byte(`"allow"`), []byte(`"deny!"`), 1)), log[9:]...), broken: true,
			anchors: []Anchor{a, b, c}, now: later,
			want: want{a.RequestID: AnchorOK, b.RequestID: AnchorFailed, c.RequestID: AnchorOK}},
		{name: "anchor for a request the log does not have", lines: log,
			anchors: []Anchor{{Name: "anchor-x", RequestID: "req-xxxxxxxxxxxx", Head: a.Head, Tool: "kubectl_get", Job: "j", Admitted: a.Admitted, Deadline: time.Minute}},
			now:     later, want: want{"req-xxxxxxxxxxxx": AnchorFailed}, reason: map[string]string{"req-xxxxxxxxxxxx": "no tool.request"}},
		{name: "stale head", lines: log,
			anchors: []Anchor{{Name: "anchor-c", RequestID: c.RequestID, Head: a.Head, Tool: "kubectl_get", Job: c.Job, Admitted: c.Admitted, Deadline: time.Minute}},
			now:     later, want: want{c.RequestID: AnchorFailed}, reason: map[string]string{c.RequestID: "stale head"}},
		{name: "another Job than the anchored one", lines: log,
			anchors: []Anchor{{Name: "anchor-c", RequestID: c.RequestID, Head: c.Head, Tool: "kubectl_get", Job: "as-other", Admitted: c.Admitted, Deadline: time.Minute}},
			now:     later, want: want{c.RequestID: AnchorFailed}, reason: map[string]string{c.RequestID: "as-other"}},
		{name: "the log records another tool than the webhook admitted", lines: log,
			anchors: []Anchor{{Name: "anchor-c", RequestID: c.RequestID, Head: c.Head, Tool: "terraform_apply", Job: c.Job, Admitted: c.Admitted, Deadline: time.Minute}},
			now:     later, want: want{c.RequestID: AnchorFailed},
			reason: map[string]string{c.RequestID: `admitted tool "terraform_apply", but the call's tool.request (line 15) records tool "kubectl_get"`}},
		{name: "call in progress", lines: running, anchors: []Anchor{a, b, c, d}, now: d.Admitted.Add(10 * time.Second),
			want: want{a.RequestID: AnchorOK, b.RequestID: AnchorOK, c.RequestID: AnchorOK, d.RequestID: AnchorInProgress}},
		{name: "call in progress cut off before its sandbox started", lines: running[:len(running)-2], anchors: []Anchor{d},
			now: d.Admitted.Add(10 * time.Second), want: want{d.RequestID: AnchorInProgress}},
		{name: "call past its deadline without a result", lines: running, anchors: []Anchor{d}, now: later,
			want: want{d.RequestID: AnchorFailed}, reason: map[string]string{d.RequestID: "died during the call"}},
		{name: "rotated log", lines: rotatedLog, anchors: []Anchor{a, b, c, e}, now: later,
			want:   want{a.RequestID: AnchorBeforeLog, b.RequestID: AnchorBeforeLog, c.RequestID: AnchorBeforeLog, e.RequestID: AnchorOK},
			reason: map[string]string{a.RequestID: "rotated"}},
		{name: "server died before sandbox.started, the call closed by recovery", lines: recovered, anchors: []Anchor{f, g}, now: later,
			want:   want{f.RequestID: AnchorOK, g.RequestID: AnchorFailed},
			reason: map[string]string{f.RequestID: "closed the call", g.RequestID: "no sandbox.started"}},
		{name: "the create failed after the webhook anchored the Job", lines: createFailed, anchors: []Anchor{h, i}, now: later,
			want:   want{h.RequestID: AnchorOK, i.RequestID: AnchorFailed},
			reason: map[string]string{h.RequestID: "the create of Job as-kubectl-get-req-hhhhhhhhhhhh failed", i.RequestID: "no sandbox.started"}},
		{name: "the create failed, the call just ended", lines: createFailed, anchors: []Anchor{h}, now: h.Admitted.Add(time.Second),
			want: want{h.RequestID: AnchorOK}},
		{name: "empty log", lines: nil, anchors: []Anchor{a}, now: later, want: want{a.RequestID: AnchorBeforeLog}},
		{name: "no anchors", lines: log, now: later, want: want{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := VerifyAnchors(recordsOf(t, tt.lines, tt.broken), tt.anchors, tt.now)
			checkAnchorReport(t, rep, byRequestID, tt.want, tt.reason)
			if rep.Lines != len(tt.lines) {
				t.Errorf("report covers %d lines, want %d", rep.Lines, len(tt.lines))
			}
		})
	}
}

// TestVerifyFileAnchors: one pass verifies the chain and the anchors; an edited line stops both at the
// line, and the anchors are judged against the lines before it.
func TestVerifyFileAnchors(t *testing.T) {
	clock := &anchorClock{t: anchorT0}
	l, path := openAnchored(t, clock, t.TempDir(), "audit.jsonl")
	a := anchoredCall(t, l, clock, "req-aaaaaaaaaaaa", true)
	b := anchoredCall(t, l, clock, "req-bbbbbbbbbbbb", true)
	later := clock.t.Add(time.Hour)

	sum, rep, err := VerifyFileAnchors(path, []Anchor{a, b}, later)
	if err != nil || sum.Lines != 14 || rep.OK != 2 || rep.Lines != 14 {
		t.Fatalf("intact: %+v %+v %v", sum, rep, err)
	}

	lines := readLines(t, path)
	lines[8] = bytes.Replace(lines[8], []byte(`"allow"`), []byte(`"deny!"`), 1)
	writeLines(t, path, lines)
	sum, rep, err = VerifyFileAnchors(path, []Anchor{a, b}, later)
	var verr *VerifyError
	if !errors.As(err, &verr) || verr.Line != 9 {
		t.Fatalf("edited line 9: %v", err)
	}
	if sum.Lines != 8 || rep.Lines != 8 || rep.OK != 1 || rep.Failed != 1 {
		t.Fatalf("edited line 9: summary %+v, report %+v", sum, rep)
	}
}

// TestHead: the head is the hash of the last line (what the next line's prev carries), also when
// another writer appended it.
func TestHead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l := openLog(t, path)
	if h, err := l.Head(); err != nil || h != zeroHash {
		t.Fatalf("empty log: head %q, %v", h, err)
	}
	writeChain(t, l, "req-1")
	other := openLog(t, path)
	if err := other.Write(Event{RequestID: "req-2", Name: EventToolRequest}); err != nil {
		t.Fatal(err)
	}
	h, err := l.Head()
	if err != nil {
		t.Fatal(err)
	}
	sum := mustVerify(t, path, len(callChain)+1)
	if h != sum.LastHash || !ValidHead(h) {
		t.Fatalf("head %s, want the last line's hash %s", h, sum.LastHash)
	}
	_ = l.Close()
	if _, err := l.Head(); !errors.Is(err, ErrClosed) {
		t.Fatalf("head after Close: %v", err)
	}
}

// TestVerifyFilesAnchors: several logs of one identity are held together against the anchors: each anchor
// is judged by the log that has its call, an anchor in no log fails, one older than every log is before
// them, and a call cut out of its own log fails there, whatever the other logs hold.
func TestVerifyFilesAnchors(t *testing.T) {
	clock := &anchorClock{t: anchorT0}
	dir := t.TempDir()
	early := Anchor{Name: "anchor-early", RequestID: "req-eeeeeeeeeeee", Head: strings.Repeat("e", 64), Tool: "kubectl_get",
		Job: "as-early", Admitted: clock.now(), Deadline: time.Minute}
	l1, p1 := openAnchored(t, clock, dir, "one.jsonl")
	l2, p2 := openAnchored(t, clock, dir, "two.jsonl")
	a := anchoredCall(t, l1, clock, "req-aaaaaaaaaaaa", true)
	b := anchoredCall(t, l2, clock, "req-bbbbbbbbbbbb", true)
	c := anchoredCall(t, l2, clock, "req-cccccccccccc", false) // its tool.result never written
	stray := Anchor{Name: "anchor-stray", RequestID: "req-ffffffffffff", Head: strings.Repeat("f", 64), Tool: "kubectl_get",
		Job: "as-stray", Admitted: clock.now(), Deadline: time.Minute}
	later := clock.t.Add(time.Hour)
	all := []Anchor{a, b, c, stray, early}

	files, rep, err := VerifyFilesAnchors([]string{p1, p2}, all, later)
	if err != nil || len(files) != 2 || files[0].Summary.Lines != 7 || files[1].Summary.Lines != 11 || files[0].Broken != nil {
		t.Fatalf("files %+v, %v", files, err)
	}
	want := map[string]struct {
		status AnchorStatus
		file   string
		reason string
	}{
		"anchor-early":            {AnchorBeforeLog, p1, "before this log's first line"},
		"anchor-req-aaaaaaaaaaaa": {AnchorOK, p1, "tool.result at line 7"},
		"anchor-req-bbbbbbbbbbbb": {AnchorOK, p2, "tool.result at line 7"},
		"anchor-req-cccccccccccc": {AnchorFailed, p2, "no tool.result follows"},
		"anchor-stray":            {AnchorFailed, "", "no line of any of these 2 logs"},
	}
	if rep.OK != 2 || rep.Failed != 2 || rep.BeforeLog != 1 || rep.Lines != 18 || len(rep.Results) != 5 {
		t.Fatalf("report %+v", rep)
	}
	for _, r := range rep.Results {
		w := want[r.Anchor.Name]
		if r.Status != w.status || r.File != w.file || !strings.Contains(r.Reason, w.reason) {
			t.Errorf("%s: %s in %s (%s); want %s in %s (%q)", r.Anchor.Name, r.Status, r.File, r.Reason, w.status, w.file, w.reason)
		}
	}

	// One log: exactly what VerifyFileAnchors reports.
	_, one, err := VerifyFilesAnchors([]string{p2}, all, later)
	_, single, err2 := VerifyFileAnchors(p2, all, later)
	if err != nil || err2 != nil {
		t.Fatal(err, err2)
	}
	for i := range single.Results {
		single.Results[i].File = p2
	}
	if fmt := func(r AnchorReport) string { return strings.ReplaceAll(strings.TrimSpace(sprint(r)), p2, "") }; fmt(one) != fmt(single) {
		t.Errorf("one log:\n%s\nVerifyFileAnchors:\n%s", fmt(one), fmt(single))
	}

	// A broken chain is the file's, not the error; a missing file is the error.
	lines := readLines(t, p2)
	lines[1] = bytes.Replace(lines[1], []byte(`"allow"`), []byte(`"deny!"`), 1)
	writeLines(t, p2, lines)
	files, _, err = VerifyFilesAnchors([]string{p1, p2}, all, later)
	if err != nil || files[1].Broken == nil || files[1].Broken.Line != 2 || files[1].Summary.Lines != 1 {
		t.Fatalf("broken second log: %+v, %v", files, err)
	}
	if _, _, err := VerifyFilesAnchors([]string{p1, filepath.Join(dir, "gone.jsonl")}, all, later); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "gone.jsonl") {
		t.Fatalf("missing log: %v", err)
	}
}

func sprint(r AnchorReport) string {
	var b strings.Builder
	for _, x := range r.Results {
		b.WriteString(string(x.Status) + " " + x.Anchor.Name + " " + x.Reason + "\n")
	}
	return b.String()
}
