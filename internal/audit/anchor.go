package audit

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/sha256hex"
)

// Anchors. The audit file lives on the MCP server's host, which the threat model does not trust: whoever
// controls that host can cut lines off the end of the file, or delete a call and rewrite every line after
// it with valid hashes, and the chain alone still verifies. So the chain is anchored in the cluster: before
// the server creates a call's sandbox Job (or claims a warm Pod for it) it reads the chain's Head and sends
// it with the Job, the admission webhook accepts the Job only with a well-formed head, and on admitting it
// records an Anchor — request ID, head, tool, Job, time — in the API server, where the MCP server's
// credentials cannot change or delete it.
//
// An anchor pins the log in two ways. Its head is the hash of one exact line, which, being chained, fixes
// every line before it: a log in which no line has that hash was rewritten at or before that point, or
// cut off before it. And the call it records must be in the log, complete: its tool.request at or before
// the head (the server reads the head after writing the request), then a sandbox.started for the anchored
// Job after the head, then a tool.result; a call whose lines are missing was cut off or deleted. A call
// whose deadline has not passed yet may still be running, and is reported as in progress, not as a
// failure. Lines written after the newest anchor's head are protected by the chain alone until the next
// call anchors them. A warm claim that was anchored but never stored carries the pool's Void (void.go) and
// is judged by the call's own lines instead of its warm Job's.

// Fields of the tool.result with which a restarted MCP server closes a call that a killed one left open
// (service.Recover).
const (
	// FieldAbandoned is true in such a tool.result.
	FieldAbandoned = "abandoned"
	// FieldJobsDeleted lists the call's sandbox Jobs that the recovery found and deleted.
	FieldJobsDeleted = "jobs_deleted"
)

// FieldJobsCreateFailed, in a failed call's tool.result, lists the sandbox Jobs whose create failed: the API
// server refused to store them, or never answered (the MCP server then deletes such a Job should it have been
// stored after all). The webhook may have admitted the Job, and recorded its anchor, before the API server
// refused it (a ResourceQuota, a replica killed while it recorded the anchor): the anchor of such a Job is
// settled by this line instead of a sandbox.started.
const FieldJobsCreateFailed = "jobs_create_failed"

// AnchorGrace is how long after an anchored call's deadline its chain may still be unfinished: the
// server collects the result, deletes the Job and writes the last events after the sandbox ends.
const AnchorGrace = 5 * time.Minute

// ClockSkew is how far apart the clocks of the MCP host, the API server and the verifier may be: a line's
// time is the MCP host's, an anchor's admission time the API server's (see lineTimes and
// AnchorCheck.judgeTimes). Hosts kept by NTP agree to well under a second; five minutes, as Kerberos
// allows, leaves room for a host whose clock drifted or was set by hand without excusing a log dated
// ahead by more.
const ClockSkew = 5 * time.Minute

// Anchor is what the admission webhook recorded in the cluster when it admitted a call's sandbox.
type Anchor struct {
	// Name is the record's name in the cluster, for messages.
	Name string
	// RequestID is the call's request ID.
	RequestID string
	// Head is the chain head the server sent with the Job: the hex SHA-256 of the last line of the log
	// when it created the sandbox (what Log.Head returns).
	Head string
	// Tool is the policy tool of the call.
	Tool string
	// Job is the Job that serves the call: the call's own Job, or the warm Job whose Pod it claimed.
	Job string
	// User is the API user that created the Job or claimed the Pod: the MCP server's identity, which tells
	// apart the calls of several servers that share a cluster.
	User string
	// Admitted is when the webhook admitted the call (the cluster's clock).
	Admitted time.Time
	// Deadline is the tool's deadline; until Admitted+Deadline+AnchorGrace the call may still run.
	Deadline time.Duration
	// Pod, PodUID and PodResourceVersion are, for a warm claim, the claimed Pod and the resourceVersion of
	// it the claim was admitted against; empty for a cold Job.
	Pod, PodUID, PodResourceVersion string
	// Void is the warm pool's mark that the claim was never stored, if it recorded one.
	Void *Void
}

// AnchorStatus is the outcome of holding a log against one anchor.
type AnchorStatus string

// The outcomes.
const (
	// AnchorOK: the head is a line of the log and the call's chain is complete after it.
	AnchorOK AnchorStatus = "ok"
	// AnchorInProgress: the call's chain is not complete, but its deadline (plus AnchorGrace) has not
	// passed: it may still be running.
	AnchorInProgress AnchorStatus = "in progress"
	// AnchorBeforeLog: the call was admitted before the log's first line and the log has no trace of it:
	// it belongs to an older, rotated log, which has to be verified on its own.
	AnchorBeforeLog AnchorStatus = "before this log"
	// AnchorFailed: the log was truncated or rewritten (or, for a call without its result, the server
	// died during it).
	AnchorFailed AnchorStatus = "failed"
	// AnchorVoid: a warm claim that was admitted and anchored but never stored (the pool's Void): its warm
	// Job never served the call, and the log has the call, closed, around the anchor's head. Not a failure.
	AnchorVoid AnchorStatus = "void"
)

// AnchorResult is the outcome for one anchor.
type AnchorResult struct {
	Anchor Anchor
	Status AnchorStatus
	// HeadLine is the line whose hash is the anchor's head; 0 when no line has it.
	HeadLine int
	// Reason says in one line what was found; it never quotes the log's content.
	Reason string
	// File is the log the anchor was judged against, when several were (VerifyFilesAnchors): the one that
	// has the call, else the first; empty when the anchor is in none of several logs.
	File string
}

// AnchorReport is the outcome for every anchor, in the order the calls were admitted.
type AnchorReport struct {
	Results []AnchorResult
	// Lines is the number of log lines the anchors were held against.
	Lines int
	// Counts of each status.
	OK, InProgress, BeforeLog, Failed, Void int
}

// AnchorCheck holds a log against a set of anchors, one line at a time, keeping only what concerns them:
// the lines whose hash is an anchored head, and the tool.request, sandbox.started and tool.result lines
// of anchored requests. Its memory grows with the anchors, not with the log.
type AnchorCheck struct {
	anchors []Anchor
	heads   map[string]int // anchored head -> first line with that hash (0: not seen yet)
	calls   map[string]*callLines
	lines   int
	first   time.Time // time of line 1
	last    time.Time // time of the last line
	// broken is the line at which the log failed verification (nil: none); the check holds the lines
	// before it, and puts no call before such a log.
	broken *VerifyError
}

// callLines are the lines of one anchored request.
type callLines struct {
	requests []requestLine
	started  []startedLine
	results  []int
	// abandoned are the tool.results with which recovery closed the call, with the Jobs it deleted;
	// createFailed those of a call that ended because the create of these Jobs failed.
	abandoned, createFailed []closingLine
}

// closingLine is a tool.result that closed the call, and the Jobs it names as never run by it.
type closingLine struct {
	line int
	jobs []string
}

type startedLine struct {
	line int
	job  string
	tool string
	time time.Time
}

// requestLine is a tool.request: its line, the tool it records and when the MCP server says it was made.
type requestLine struct {
	line int
	tool string
	time time.Time
}

// NewAnchorCheck prepares to hold a log against anchors.
func NewAnchorCheck(anchors []Anchor) *AnchorCheck {
	c := &AnchorCheck{anchors: slices.Clone(anchors), heads: map[string]int{}, calls: map[string]*callLines{}}
	for _, a := range anchors {
		c.heads[a.Head] = 0
		c.calls[a.RequestID] = &callLines{}
	}
	return c
}

// Add takes the next line of the log, in file order from line 1, as a record with its Raw bytes (as Read
// and Verify produce it). It keeps nothing of rec.Raw.
func (c *AnchorCheck) Add(rec Record) {
	c.lines++
	n := c.lines
	if n == 1 {
		c.first = rec.Time
	}
	c.last = rec.Time
	h := sha256hex.Of(rec.Raw)
	if line, ok := c.heads[h]; ok && line == 0 {
		c.heads[h] = n
	}
	cl := c.calls[rec.RequestID]
	if cl == nil {
		return
	}
	switch rec.Event {
	case EventToolRequest:
		cl.requests = append(cl.requests, requestLine{line: n, tool: rec.Tool, time: rec.Time})
	case EventSandboxStarted:
		job, _ := rec.Fields["job"].(string)
		cl.started = append(cl.started, startedLine{line: n, job: job, tool: rec.Tool, time: rec.Time})
	case EventToolResult:
		cl.results = append(cl.results, n)
		if ab, _ := rec.Fields[FieldAbandoned].(bool); ab {
			cl.abandoned = append(cl.abandoned, closingLine{line: n, jobs: jobsIn(rec, FieldJobsDeleted)})
		}
		if jobs := jobsIn(rec, FieldJobsCreateFailed); len(jobs) > 0 {
			cl.createFailed = append(cl.createFailed, closingLine{line: n, jobs: jobs})
		}
	}
}

// closedNaming is the first of lines after line h that names job; 0 if none does.
func closedNaming(lines []closingLine, h int, job string) int {
	for _, l := range lines {
		if l.line > h && slices.Contains(l.jobs, job) {
			return l.line
		}
	}
	return 0
}

// jobsIn is the list of Job names in field of rec.
func jobsIn(rec Record, field string) []string {
	var jobs []string
	list, _ := rec.Fields[field].([]any)
	for _, j := range list {
		if s, ok := j.(string); ok {
			jobs = append(jobs, s)
		}
	}
	return jobs
}

// Report judges every anchor against the lines added so far, at time now.
func (c *AnchorCheck) Report(now time.Time) AnchorReport {
	rep := AnchorReport{Lines: c.lines}
	for _, a := range byAdmission(c.anchors) {
		rep.add(c.judge(a, now))
	}
	return rep
}

// byAdmission is anchors in the order the calls were admitted (then by name).
func byAdmission(anchors []Anchor) []Anchor {
	sorted := slices.Clone(anchors)
	slices.SortStableFunc(sorted, func(a, b Anchor) int {
		if d := a.Admitted.Compare(b.Admitted); d != 0 {
			return d
		}
		return compareStrings(a.Name, b.Name)
	})
	return sorted
}

// add appends r and counts its status.
func (rep *AnchorReport) add(r AnchorResult) {
	switch r.Status {
	case AnchorOK:
		rep.OK++
	case AnchorInProgress:
		rep.InProgress++
	case AnchorBeforeLog:
		rep.BeforeLog++
	case AnchorVoid:
		rep.Void++
	default:
		rep.Failed++
	}
	rep.Results = append(rep.Results, r)
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// judge holds the log against one anchor: its head must be a line of the log, at or after the call's
// tool.request; then the anchored Job's run must follow (judgeRun), unless the pool voided the claim
// (judgeVoid).
func (c *AnchorCheck) judge(a Anchor, now time.Time) AnchorResult {
	res := AnchorResult{Anchor: a}
	fail := func(format string, args ...any) AnchorResult {
		res.Status, res.Reason = AnchorFailed, fmt.Sprintf(format, args...)
		return res
	}
	running := now.Before(a.Admitted.Add(a.Deadline + AnchorGrace))
	cl := c.calls[a.RequestID]
	seen := c.mentions(a.RequestID)
	h := c.heads[a.Head]
	res.HeadLine = h
	if h == 0 {
		switch {
		case !seen && c.broken != nil:
			return fail("its head %s is no line of this log before line %d, where the log fails verification: a log that fails cannot show that the call came before it",
				short(a.Head), c.broken.Line)
		case !seen && c.lines == 0:
			res.Status, res.Reason = AnchorBeforeLog, "the log is empty; the call is in an older, rotated log, or the log was emptied"
			return res
		case !seen && a.Admitted.Before(c.start()):
			res.Status = AnchorBeforeLog
			begins := "this log's first line"
			if c.start().Before(c.first) {
				begins = "the first call anchored in this log"
			}
			res.Reason = fmt.Sprintf("admitted before %s (%s); it is in an older, rotated log, or the lines before were deleted",
				begins, c.start().UTC().Format(time.RFC3339))
			return res
		case a.Admitted.After(c.last):
			return fail("its head %s is no line of this log, which ends at line %d (%s), before the call was admitted: lines were cut off the end of the log",
				short(a.Head), c.lines, c.last.UTC().Format(time.RFC3339))
		}
		return fail("its head %s is no line of this log: the log was rewritten at or before the line the call began after, or cut off before it", short(a.Head))
	}
	if len(cl.requests) == 0 {
		return fail("its head is line %d, but the log has no tool.request of %s: the call's lines were deleted and the chain rewritten after line %d", h, a.RequestID, h)
	}
	req := cl.requests[0]
	if req.line > h {
		return fail("its head is line %d, before the call's tool.request (line %d): the server sent a stale head", h, req.line)
	}
	if req.tool != a.Tool {
		return fail("the webhook admitted tool %s, but the call's tool.request (line %d) records tool %s: the log misnames the call",
			oneLineQuote(a.Tool), req.line, oneLineQuote(req.tool))
	}
	if req.time.After(a.Admitted.Add(ClockSkew)) {
		return fail("its tool.request (line %d) is dated %s, more than %s after the call was admitted: the log's times were rewritten, or the MCP host's clock is ahead",
			req.line, req.time.UTC().Format(time.RFC3339), ClockSkew)
	}
	if a.Void == nil {
		return c.judgeRun(a, res, h, running)
	}
	// A claim that never landed, as the pool recorded it: judged by the call's own lines, not its Job's.
	res, note, done := c.judgeVoid(a, res, h, running)
	if done {
		return res
	}
	res = c.judgeRun(a, res, h, running)
	res.Reason += note
	return res
}

// judgeRun holds the log against the anchored Job's run, after the head at line h: its sandbox.started
// (or the recovery that deleted the Job), then the call's tool.result.
func (c *AnchorCheck) judgeRun(a Anchor, res AnchorResult, h int, running bool) AnchorResult {
	fail := func(format string, args ...any) AnchorResult {
		res.Status, res.Reason = AnchorFailed, fmt.Sprintf(format, args...)
		return res
	}
	inProgress := func(format string, args ...any) AnchorResult {
		res.Status = AnchorInProgress
		res.Reason = fmt.Sprintf(format, args...) + fmt.Sprintf("; the call may run until %s", a.Admitted.Add(a.Deadline+AnchorGrace).UTC().Format(time.RFC3339))
		return res
	}
	cl := c.calls[a.RequestID]
	started := 0
	for _, s := range cl.started {
		if s.line > h && (a.Job == "" || s.job == a.Job) {
			if reason := startedMismatch(a, s); reason != "" {
				return fail("its sandbox.started (line %d) %s", s.line, reason)
			}
			started = s.line
			break
		}
	}
	if started == 0 {
		// A server killed between the Job's admission and its sandbox.started line: the next server found
		// the Job in the cluster, deleted it and closed the call. Or the API server refused the Job after the
		// webhook had admitted and anchored it, and the call ended.
		if line := closedNaming(cl.abandoned, h, a.Job); line > 0 {
			res.Status = AnchorOK
			res.Reason = fmt.Sprintf("head at line %d; the server died before recording its sandbox, and the next one deleted Job %s and closed the call at line %d",
				h, a.Job, line)
			return res
		}
		if line := closedNaming(cl.createFailed, h, a.Job); line > 0 {
			res.Status = AnchorOK
			res.Reason = fmt.Sprintf("head at line %d; the create of Job %s failed after its admission (the API server did not store it, or never answered), and the call ended at line %d",
				h, a.Job, line)
			return res
		}
		if running {
			return inProgress("head at line %d, no sandbox.started of Job %s yet", h, a.Job)
		}
		return fail("its head is line %d, but no sandbox.started of Job %s follows it: the log was cut or rewritten after line %d", h, a.Job, h)
	}
	for _, r := range cl.results {
		if r > started {
			res.Status = AnchorOK
			res.Reason = fmt.Sprintf("head at line %d, sandbox.started at line %d, tool.result at line %d", h, started, r)
			return res
		}
	}
	if running {
		return inProgress("head at line %d, sandbox.started at line %d, no tool.result yet", h, started)
	}
	return fail("its head is line %d and sandbox.started line %d, but no tool.result follows: the log was cut or rewritten after line %d, or the server died during the call",
		h, started, h)
}

// startedMismatch says how the sandbox.started line s of a's Job contradicts the anchor; "" when it does not.
// The MCP server writes it as soon as the create (or the claim) of the Job returns, so its time is the
// admission's, give or take ClockSkew; the bound after it is generous (the deadline and AnchorGrace), so
// that a create retried after a quota conflict never misfires.
func startedMismatch(a Anchor, s startedLine) string {
	switch {
	case s.tool != a.Tool:
		return fmt.Sprintf("records tool %s, but the webhook admitted tool %s: the log misnames the call", oneLineQuote(s.tool), oneLineQuote(a.Tool))
	case s.time.Before(a.Admitted.Add(-ClockSkew)):
		return fmt.Sprintf("is dated %s, more than %s before the Job was admitted: the log's times were rewritten, or the MCP host's clock is behind",
			s.time.UTC().Format(time.RFC3339), ClockSkew)
	case s.time.After(a.Admitted.Add(a.Deadline + AnchorGrace + ClockSkew)):
		return fmt.Sprintf("is dated %s, after the call's deadline: the log's times were rewritten, or the MCP host's clock is ahead",
			s.time.UTC().Format(time.RFC3339))
	}
	return ""
}

// oneLineQuote quotes a name from the log or the cluster for a one-line reason.
func oneLineQuote(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	return strconv.Quote(s)
}

// start is when this log begins, for the verdict BEFORE LOG: the time of line 1, or, if earlier, the
// admission of the earliest anchored call whose head is a line of this log. Line 1's time is the MCP
// server's word; an anchored head is the cluster's proof that the log existed when that call was admitted.
func (c *AnchorCheck) start() time.Time {
	start := c.first
	for _, a := range c.anchors {
		if c.heads[a.Head] > 0 && a.Admitted.Before(start) {
			start = a.Admitted
		}
	}
	return start
}

// short abbreviates a hash for messages.
func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// VerifyAnchors holds records (a whole log, in file order from line 1, as Read returns them) against
// anchors at time now. It checks the anchors only; Verify checks the chain itself.
func VerifyAnchors(records []Record, anchors []Anchor, now time.Time) AnchorReport {
	c := NewAnchorCheck(anchors)
	for _, r := range records {
		c.Add(r)
	}
	return c.Report(now)
}

// VerifyFileAnchors verifies the chain of the log at path, as VerifyFile does, and in the same pass
// holds it against anchors at time now. When the chain is broken the error is the *VerifyError of the
// first bad line, and the report covers the lines before it.
func VerifyFileAnchors(path string, anchors []Anchor, now time.Time) (Summary, AnchorReport, error) {
	c := NewAnchorCheck(anchors)
	sum, err := verifyFileWith(path, now, c.Add)
	errors.As(err, &c.broken)
	return sum, c.Report(now), err
}

// verifyFileWith verifies the chain of the log at path, and its times at now, under its read lock, handing
// each record to visit.
func verifyFileWith(path string, now time.Time, visit func(Record)) (Summary, error) {
	var sum Summary
	err := withReadLock(path, func(f *os.File) error {
		var err error
		sum, err = verify(f, now, visit)
		return err
	})
	return sum, err
}

// FileResult is one log's chain, as VerifyFilesAnchors verified it.
type FileResult struct {
	Path    string
	Summary Summary
	// Broken is the first line that fails the chain (nil: intact); the anchors were held against the
	// lines before it.
	Broken *VerifyError
}

// VerifyFilesAnchors verifies the chain of each log in paths and holds them together against anchors at
// time now: several logs of one cluster identity (rotated files, or servers that share the identity), each
// a chain of its own. An anchor is judged against the log that has its head, else the one that has lines
// of its call; an anchor that no log mentions is BEFORE LOG when it is so for every log, and FAIL
// otherwise. With one path the report is exactly VerifyFileAnchors'. A chain that is broken is reported in
// its FileResult, not as the error, which is for a log that cannot be read.
func VerifyFilesAnchors(paths []string, anchors []Anchor, now time.Time) ([]FileResult, AnchorReport, error) {
	files := make([]FileResult, len(paths))
	checks := make([]*AnchorCheck, len(paths))
	for i, p := range paths {
		c := NewAnchorCheck(anchors)
		sum, err := verifyFileWith(p, now, c.Add)
		var verr *VerifyError
		if err != nil && !errors.As(err, &verr) {
			return nil, AnchorReport{}, fmt.Errorf("%s: %w", p, err)
		}
		c.broken = verr
		files[i], checks[i] = FileResult{Path: p, Summary: sum, Broken: verr}, c
	}
	rep := AnchorReport{}
	for _, c := range checks {
		rep.Lines += c.lines
	}
	for _, a := range byAdmission(anchors) {
		rep.add(judgeAcross(checks, paths, a, now))
	}
	return files, rep, nil
}

// judgeAcross judges a against each log and keeps the verdict of the log that has the call.
func judgeAcross(checks []*AnchorCheck, paths []string, a Anchor, now time.Time) AnchorResult {
	results := make([]AnchorResult, len(checks))
	for i, c := range checks {
		results[i] = c.judge(a, now)
		results[i].File = paths[i]
	}
	for _, pick := range []func(i int) bool{
		func(i int) bool { return results[i].Status == AnchorOK || results[i].Status == AnchorVoid },
		func(i int) bool { return results[i].HeadLine > 0 },
		func(i int) bool { return checks[i].mentions(a.RequestID) },
	} {
		for i := range results {
			if pick(i) {
				return results[i]
			}
		}
	}
	if len(results) == 1 {
		return results[0]
	}
	for _, r := range results {
		if r.Status != AnchorBeforeLog {
			res := AnchorResult{Anchor: a, Status: AnchorFailed,
				Reason: fmt.Sprintf("its head %s is no line of any of these %d logs, and none has a line of the call: its lines were cut or rewritten, or the call was not made through these logs",
					short(a.Head), len(paths))}
			return res
		}
	}
	return results[0]
}

// mentions reports whether the log has any line of the request.
func (c *AnchorCheck) mentions(requestID string) bool {
	cl := c.calls[requestID]
	return cl != nil && len(cl.requests)+len(cl.started)+len(cl.results) > 0
}
