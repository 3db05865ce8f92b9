// Package audit is agent-sandbox's audit sink: an append-only JSON-lines file in which every tool call
// leaves the chain tool.request -> guardrail.decision -> [approval.*] -> sandbox.started ->
// credential.issued -> sandbox.completed -> credential.revoked -> tool.result under one request ID.
//
// # Line format
//
// Each event is one line: one JSON object followed by '\n'. The members always appear in this order
// (the example is wrapped here; a real line has no newline inside):
//
//	{"seq":1,"time":"2026-01-02T03:04:05.123456789Z","request_id":"req-1","event":"tool.request",
//	"tool":"kubectl_get","fields":{"namespace":"demo"},"prev":"000…000","hash":"3f5a…"}
//
// The members are:
//
//   - seq: 1-based, consecutive line number within the file.
//   - time: RFC 3339 with nanoseconds, UTC, from the Log's clock.
//   - request_id, event, tool: from the Event (scrubbed like everything else).
//   - fields: a JSON object, always bounded (see MaxStringBytes) and then passed through scrub.Value
//     before it is written.
//   - prev: hex SHA-256 of the previous line's exact bytes (without its '\n'); 64 zeros on line 1.
//   - hash: hex SHA-256 of the line's body, which is the line with the trailing `,"hash":"…"` member
//     removed (everything from '{' up to and including the prev member, then '}').
//
// No line is longer than MaxLineBytes (64 KiB): string values over MaxStringBytes (1 KiB) are replaced,
// before scrubbing, by {"truncated":true,"bytes":N,"sha256":"…"}, and fields that would still make the
// line too long by the same summary of the whole fields object. Verify, Read and Open refuse a line
// longer than twice that, by its line number, without loading it.
//
// prev links every line to the one before it, so editing or deleting a line breaks the link on the
// following line; hash makes each line self-checking, so an edit of the last line (which has no
// successor) is detected too. The chain is not keyed: somebody able to write the file can rewrite its
// tail and recompute every hash after the point of the edit, and cutting whole lines off the end of the
// file leaves a valid, shorter chain. Verify alone cannot see either. Anchors kept outside the host that
// writes the file can: before each sandbox Job the MCP server hands the chain's Head to the cluster, the
// admission webhook (which the MCP host cannot impersonate) records it with the call's request ID, and
// VerifyAnchors holds the log against those records (see Anchor). Verify also reports Summary.LastHash,
// so that a copy of it kept elsewhere anchors the chain up to that line.
//
// # Writers and crashes
//
// Every append happens under an exclusive flock(2) on the file, so several processes (the MCP server,
// a CLI) may append to the same file; under the lock a Log re-reads the file's tail whenever the size
// differs from what it last wrote, so seq and prev stay right across processes. Each line is written
// with one write call on an O_APPEND descriptor. A process killed mid-write can leave a torn last line
// without its '\n'; the next writer (Open, or a Write that finds it) truncates the torn bytes away and
// appends an audit.recovered event recording how many bytes were torn and their SHA-256 (never the
// bytes themselves), so the chain continues visibly rather than silently.
//
// Secrets never reach the file: Write scrubs the event's fields, request ID and tool name with package
// scrub, and there is no way to append a line without going through Write.
package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-sandbox/agent-sandbox/internal/scrub"
	"github.com/agent-sandbox/agent-sandbox/internal/sha256hex"
)

// Event names. Every tool call writes, under one request ID, the chain
// EventToolRequest -> EventGuardrailDecision -> [EventApproval*] -> EventSandboxStarted ->
// EventCredentialIssued -> EventSandboxCompleted -> EventCredentialRevoked -> EventToolResult.
const (
	// EventToolRequest records an MCP tool call as the agent made it.
	EventToolRequest = "tool.request"
	// EventGuardrailDecision records the server-side policy decision (allow, deny, needs approval).
	EventGuardrailDecision = "guardrail.decision"
	// EventApprovalRequested records that a call is waiting for a human approval.
	EventApprovalRequested = "approval.requested"
	// EventApprovalGranted records that an approver signed a token for the request.
	EventApprovalGranted = "approval.granted"
	// EventApprovalDenied records that an approver refused the request.
	EventApprovalDenied = "approval.denied"
	// EventApprovalConsumed records that the single-use grant was taken for a Job.
	EventApprovalConsumed = "approval.consumed"
	// EventApprovalReturned records that a consumed grant was given back, unused: the call ended before its
	// Job was sent to the cluster (field returned: false when the store could not take it back).
	EventApprovalReturned = "approval.returned"
	// EventSandboxStarted records that the sandbox Job was created.
	EventSandboxStarted = "sandbox.started"
	// EventCredentialIssued records that Vault minted the per-action credential (lease metadata only).
	EventCredentialIssued = "credential.issued"
	// EventSandboxCompleted records that the sandbox Job finished, with its outcome.
	EventSandboxCompleted = "sandbox.completed"
	// EventCredentialRevoked records that the per-action credential was revoked.
	EventCredentialRevoked = "credential.revoked"
	// EventToolResult records what the server returned to the agent.
	EventToolResult = "tool.result"
	// EventRecovered is written by the log itself after it truncated a torn last line left by a crash.
	// Its fields are FieldTornBytes and FieldTornSHA256.
	EventRecovered = "audit.recovered"
)

// Field names of the EventRecovered event.
const (
	// FieldTornBytes is the number of bytes of the torn partial line that was truncated.
	FieldTornBytes = "torn_bytes"
	// FieldTornSHA256 is the hex SHA-256 of the torn bytes, so a copy taken before recovery can be matched.
	FieldTornSHA256 = "torn_sha256"
)

// zeroHash is the prev value of the first line.
const zeroHash = "0000000000000000000000000000000000000000000000000000000000000000"

// Sentinel errors. Verify and Read wrap ErrChainBroken, ErrTornLine and ErrLineTooLong in a *VerifyError,
// and Verify also ErrLineTime.
var (
	// ErrChainBroken means a line was edited, deleted, reordered or is not a well-formed record.
	ErrChainBroken = errors.New("audit chain broken")
	// ErrTornLine means the last line is incomplete: no trailing newline or not valid JSON.
	ErrTornLine = errors.New("audit line torn")
	// ErrClosed is returned by Write after Close.
	ErrClosed = errors.New("audit log closed")
	// ErrInvalidEvent is returned by Write for an event without a name.
	ErrInvalidEvent = errors.New("invalid audit event")
	// ErrLineTooLong means a line is longer than Verify and Read accept (twice MaxLineBytes); they wrap
	// it in a *VerifyError naming the line. Write returns it only if an event could not be brought
	// under MaxLineBytes, which its bounds rule out.
	ErrLineTooLong = errors.New("audit line too long")
	// ErrLineTime means a line is dated more than ClockSkew after the verifier's clock, or more than
	// ClockSkew before a line ahead of it: its times were rewritten, or the MCP host's clock is wrong.
	ErrLineTime = errors.New("audit line time implausible")
)

// Event is what callers record. The log adds seq, time, prev and hash.
type Event struct {
	// RequestID ties together all events of one tool call.
	RequestID string
	// Name is one of the Event* constants.
	Name string
	// Tool is the policy name of the tool, if any.
	Tool string
	// Fields carries event details; it is scrubbed before it is written.
	Fields map[string]any
}

// Record is one decoded line of the log; its members are described in the package comment.
type Record struct {
	Seq       int64          `json:"seq"`
	Time      time.Time      `json:"time"`
	RequestID string         `json:"request_id"`
	Event     string         `json:"event"`
	Tool      string         `json:"tool"`
	Fields    map[string]any `json:"fields"`
	Prev      string         `json:"prev"`
	Hash      string         `json:"hash"`
	// Raw is the exact line as stored, without its '\n'.
	Raw []byte `json:"-"`
}

// lineBody is the hashed part of a line. encoding/json writes struct fields in declaration order, which
// gives the fixed key order of the format.
type lineBody struct {
	Seq       int64          `json:"seq"`
	Time      string         `json:"time"`
	RequestID string         `json:"request_id"`
	Event     string         `json:"event"`
	Tool      string         `json:"tool"`
	Fields    map[string]any `json:"fields"`
	Prev      string         `json:"prev"`
}

// Option configures a Log.
type Option func(*Log)

// WithClock sets the clock used for the time of each line. The default is time.Now; nil keeps it.
func WithClock(now func() time.Time) Option {
	return func(l *Log) {
		if now != nil {
			l.now = now
		}
	}
}

// WithSync chooses whether every append is followed by fsync(2). The default is true: a line that Write
// reported as written survives a power loss, not only a killed process. Tests and benchmarks that write
// thousands of lines may turn it off.
func WithSync(enabled bool) Option {
	return func(l *Log) { l.sync = enabled }
}

// Log appends events to one audit file. It is safe for concurrent use by several goroutines, and several
// Logs (in one process or many) may append to the same file.
type Log struct {
	path string
	now  func() time.Time
	sync bool

	mu   sync.Mutex
	f    *os.File
	seq  int64  // seq of the last line in the file as this Log knows it
	prev string // hash of the last line's bytes, the next line's prev
	size int64  // file size after this Log's last read or write; -1 forces a re-read
	// lastLen is the length of the line this Log appended last, '\n' included.
	lastLen int
	closed  bool
}

// Open opens (creating it with mode 0600, and its directory with mode 0700, if missing) the audit log at
// path and positions the chain after its last line. A torn last line left by a crash is truncated away and
// recorded with an EventRecovered event before Open returns.
func Open(path string, opts ...Option) (*Log, error) {
	l := &Log{path: path, now: time.Now, sync: true, size: -1}
	for _, o := range opts {
		o(l)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create audit log directory: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open audit log: %w", err)
	}
	l.f = f
	l.mu.Lock()
	defer l.mu.Unlock()
	err = l.locked(func() error {
		_, err := l.syncTail()
		return err
	})
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("open audit log %s: %w", path, err)
	}
	return l, nil
}

// Path returns the file the Log appends to.
func (l *Log) Path() string { return l.path }

// Write scrubs e and appends it as one line. It returns only after the line is written (and, unless
// WithSync(false), synced). An error means the line may be missing; the chain is still consistent, since
// the next Write re-reads the file's tail first.
func (l *Log) Write(e Event) error {
	_, err := l.WriteSize(e)
	return err
}

// WriteSize is Write that also returns the length of the line it wrote, its '\n' included, for callers that
// account for what they write (the MCP server's audit budget per client).
func (l *Log) WriteSize(e Event) (int, error) {
	if e.Name == "" {
		return 0, fmt.Errorf("%w: empty event name", ErrInvalidEvent)
	}
	// Bound first, so that neither the scrubber nor the encoder ever handles a huge value.
	fields := scrubFields(e.Fields)
	e.RequestID = scrub.String(boundHeader(e.RequestID))
	e.Tool = scrub.String(boundHeader(e.Tool))
	e.Name = scrub.String(boundHeader(e.Name))

	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return 0, ErrClosed
	}
	err := l.locked(func() error {
		if _, err := l.syncTail(); err != nil {
			return err
		}
		return l.append(e, fields)
	})
	if err != nil {
		return 0, fmt.Errorf("write audit event %s: %w", e.Name, err)
	}
	return l.lastLen, nil
}

// Head returns the head of the chain: the hex SHA-256 of the last line in the file (the prev the next line
// will carry), or 64 zeros for an empty log. It reads the file's tail under the lock first, so a line
// another process appended counts too. The MCP server hands the head to the cluster with each sandbox
// Job it creates, and the admission webhook records it as an anchor outside this host (see Anchor).
func (l *Log) Head() (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return "", ErrClosed
	}
	err := l.locked(func() error {
		_, err := l.syncTail()
		return err
	})
	if err != nil {
		return "", fmt.Errorf("read audit chain head: %w", err)
	}
	return l.prev, nil
}

// ValidHead reports whether s has the form of a chain head: 64 lowercase hex digits.
func ValidHead(s string) bool { return sha256hex.Valid(s) }

// Close closes the file. Write after Close returns ErrClosed.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	if err := l.f.Close(); err != nil {
		return fmt.Errorf("close audit log: %w", err)
	}
	return nil
}

// locked runs fn while holding the exclusive flock. The caller holds l.mu.
func (l *Log) locked(fn func() error) error {
	if err := lockFile(l.f, true); err != nil {
		return err
	}
	err := fn()
	if uerr := unlockFile(l.f); uerr != nil && err == nil {
		err = uerr
	}
	return err
}

// append encodes one line and writes it with a single write call. The caller holds l.mu and the flock
// and has brought seq, prev and size up to date with syncTail.
func (l *Log) append(e Event, fields map[string]any) error {
	body := lineBody{
		Seq:       l.seq + 1,
		Time:      l.now().UTC().Format(time.RFC3339Nano),
		RequestID: e.RequestID,
		Event:     e.Name,
		Tool:      e.Tool,
		Fields:    fields,
		Prev:      l.prev,
	}
	line, err := encodeLine(body)
	if err != nil {
		return err
	}
	if len(line) > MaxLineBytes {
		if body.Fields, err = boundFields(fields, line); err != nil {
			return err
		}
		if line, err = encodeLine(body); err != nil {
			return err
		}
		if len(line) > MaxLineBytes {
			// Cannot happen: everything but the fields is bounded by MaxStringBytes.
			return fmt.Errorf("%w: %d bytes", ErrLineTooLong, len(line))
		}
	}
	buf := make([]byte, len(line)+1)
	copy(buf, line)
	buf[len(line)] = '\n'
	n, err := l.f.Write(buf)
	if err != nil || n != len(buf) {
		if err == nil {
			err = io.ErrShortWrite
		}
		// A short write (a full disk) leaves a torn line. Under the flock nobody else appended, so cut it
		// off again: the log ends on its last whole line and the chain is intact. If even that fails,
		// forget what we know, so the next append re-reads the tail and recovers it.
		if n > 0 {
			if terr := l.f.Truncate(l.size); terr != nil {
				l.size = -1
			}
		}
		return fmt.Errorf("append line: %w", err)
	}
	if l.sync {
		if err := l.f.Sync(); err != nil {
			l.size = -1
			return fmt.Errorf("sync audit log: %w", err)
		}
	}
	l.seq++
	l.prev = sha256hex.Of(line)
	l.size += int64(len(buf))
	l.lastLen = len(buf)
	return nil
}

// scrubFields bounds (see MaxStringBytes) and then scrubs an event's fields, always returning a non-nil
// map.
func scrubFields(fields map[string]any) map[string]any {
	out, _ := scrub.Value(bound(fields, 0)).(map[string]any)
	if out == nil {
		out = map[string]any{}
	}
	return out
}

// encodeLine renders body and appends its hash member. The result has no trailing newline.
func encodeLine(body lineBody) ([]byte, error) {
	if body.Fields == nil {
		body.Fields = map[string]any{}
	}
	b, err := encodeJSON(body)
	if err != nil {
		return nil, err
	}
	sum := sha256hex.Of(b)
	line := make([]byte, 0, len(b)+len(hashPrefix)+len(sum)+2)
	line = append(line, b[:len(b)-1]...)
	line = append(line, hashPrefix...)
	line = append(line, sum...)
	line = append(line, '"', '}')
	return line, nil
}

// encodeJSON encodes v as one line. HTML escaping is off so that "<redacted>" stays greppable;
// json.Encoder still escapes '\n', so a line never contains a raw newline.
func encodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("encode audit line: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}

// hashPrefix introduces the hash member, always the last member of a line.
const hashPrefix = `,"hash":"`

// splitHash returns the body of line (the bytes that hash covers) and the stored hash, or ok=false if the
// line does not end with a well-formed hash member.
func splitHash(line []byte) (body []byte, sum string, ok bool) {
	const tail = len(hashPrefix) + 64 + 2
	if len(line) < tail+2 || !bytes.HasSuffix(line, []byte(`"}`)) {
		return nil, "", false
	}
	start := len(line) - tail
	if !bytes.Equal(line[start:start+len(hashPrefix)], []byte(hashPrefix)) {
		return nil, "", false
	}
	sum = string(line[start+len(hashPrefix) : len(line)-2])
	if !sha256hex.Valid(sum) {
		return nil, "", false
	}
	body = make([]byte, 0, start+1)
	body = append(body, line[:start]...)
	body = append(body, '}')
	return body, sum, true
}

// ErrNoSpace means the audit log's file system has too little free space to record a whole call.
var ErrNoSpace = errors.New("no space left for the audit log")

// CallReserve is the free space a call needs before it may start: room for its chain's lines at their
// bound, so that a call is refused up front rather than run and left half recorded.
const CallReserve = 16 * MaxLineBytes

// CheckSpace returns ErrNoSpace when the log's file system has less than need bytes free for an
// unprivileged writer. When the free space cannot be read it does not refuse: Write still fails cleanly
// (a short write is cut off again, never left torn).
func (l *Log) CheckSpace(need int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(l.f.Fd()), &st); err != nil {
		return nil
	}
	if free := int64(st.Bavail) * st.Bsize; free < need {
		return fmt.Errorf("%w: %d bytes free on its file system, a call needs %d", ErrNoSpace, free, need)
	}
	return nil
}
