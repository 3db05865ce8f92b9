package audit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/sha256hex"
)

// Summary describes a log that verified.
type Summary struct {
	// Lines is the number of lines (events) in the log.
	Lines int
	// LastHash is the hex SHA-256 of the last line, the value the next line's prev will carry; 64 zeros
	// for an empty log. Keeping a copy elsewhere anchors the chain up to that line.
	LastHash string
}

// VerifyError names the first line of a log that fails verification.
type VerifyError struct {
	// Line is the 1-based line number in the file.
	Line int
	// Reason says what is wrong, in a few words; it never quotes the line's content.
	Reason string
	// Err is ErrChainBroken, ErrTornLine, ErrLineTooLong or ErrLineTime.
	Err error
}

// Error implements error.
func (e *VerifyError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Reason) }

// Unwrap lets errors.Is match ErrChainBroken, ErrTornLine, ErrLineTooLong and ErrLineTime.
func (e *VerifyError) Unwrap() error { return e.Err }

// maxReadLine is the longest line Verify and Read accept, without its '\n': the write bound MaxLineBytes
// plus the same again as slack, for lines written before there was a bound. A longer line is skipped to
// its end without being held in memory and reported as a *VerifyError wrapping ErrLineTooLong.
const maxReadLine = 2 * MaxLineBytes

// readLine reads one line into buf[:0], '\n' included, holding at most maxReadLine+1 bytes of it. For a
// longer line it returns long and reads on to the line's end without keeping anything. err is as
// for bufio.Reader.ReadBytes.
func readLine(br *bufio.Reader, buf []byte) (line []byte, long bool, err error) {
	line = buf[:0]
	for {
		frag, err := br.ReadSlice('\n')
		if len(line)+len(frag) > maxReadLine+1 {
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			return nil, true, err
		}
		line = append(line, frag...)
		if !errors.Is(err, bufio.ErrBufferFull) {
			return line, false, err
		}
	}
}

// tooLong is the error for line n, which is longer than maxReadLine.
func tooLong(n int) *VerifyError {
	return &VerifyError{Line: n, Reason: fmt.Sprintf("line longer than %d bytes, not read", maxReadLine), Err: ErrLineTooLong}
}

// Verify reads a whole log and checks, line by line, that each line is a complete, well-formed record
// whose hash matches its content, whose seq is its line number and whose prev is the hash of the line
// before. It returns a *VerifyError for the first line that fails: an edited line fails its own hash
// check (or, if its hash was recomputed, the next line's prev check), a deleted line makes the line that
// follows it fail the seq check, and a last line without its trailing newline, or that is not valid JSON,
// fails with ErrTornLine. A line longer than twice MaxLineBytes fails with ErrLineTooLong and is never
// held in memory whole. Other errors come from reading r.
func Verify(r io.Reader) (Summary, error) {
	return verify(r, time.Time{}, nil)
}

// lineTimes checks the time of each line as it comes. A line's time is the MCP server's word, and the
// anchors' verdict BEFORE LOG rests on the time of line 1: a server that rewrote its log as a chain dated
// ahead could otherwise pass every call admitted before that date, unlogged, as belonging to an older log.
// So no line may be dated more than ClockSkew after the verifier's now, and none more than ClockSkew
// before the latest line ahead of it (every line of a chain dated ahead is then dated ahead too, and found
// by any verification before that date). The writer takes each line's time under the file's lock from
// the host's clock, so an honest log goes back only when that clock is set back.
type lineTimes struct {
	now        time.Time // zero: not checked against the verifier's clock
	latest     time.Time
	latestLine int
}

func (lt *lineTimes) check(n int, t time.Time) *VerifyError {
	bad := func(format string, args ...any) *VerifyError {
		return &VerifyError{Line: n, Reason: fmt.Sprintf(format, args...), Err: ErrLineTime}
	}
	if !lt.now.IsZero() && t.After(lt.now.Add(ClockSkew)) {
		return bad("dated %s, more than %s after now (%s): a log rewritten with times ahead, or the MCP host's clock is ahead",
			t.UTC().Format(time.RFC3339), ClockSkew, lt.now.UTC().Format(time.RFC3339))
	}
	if lt.latestLine > 0 && t.Before(lt.latest.Add(-ClockSkew)) {
		return bad("dated %s, more than %s before line %d (%s): times go back, as in a log rewritten with times ahead, or the MCP host's clock was set back",
			t.UTC().Format(time.RFC3339), ClockSkew, lt.latestLine, lt.latest.UTC().Format(time.RFC3339))
	}
	if lt.latestLine == 0 || t.After(lt.latest) {
		lt.latest, lt.latestLine = t, n
	}
	return nil
}

// verify is Verify that also checks the lines' times (lineTimes, with now; a zero now skips the check
// against the verifier's clock) and hands every line that verified, in order, to visit (if not nil).
func verify(r io.Reader, now time.Time, visit func(Record)) (Summary, error) {
	sum := Summary{LastHash: zeroHash}
	times := lineTimes{now: now}
	err := eachLine(r, func(n int, line []byte, last bool) error {
		rec, verr := checkLine(n, line, sum.LastHash, last)
		if verr != nil {
			return verr
		}
		if verr := times.check(n, rec.Time); verr != nil {
			return verr
		}
		sum.Lines = n
		sum.LastHash = sha256hex.Of(line)
		if visit != nil {
			visit(rec)
		}
		return nil
	})
	return sum, err
}

// eachLine reads a log line by line and hands each complete line to fn: its 1-based number, its bytes
// without the '\n' (valid only until fn returns) and whether it is the file's last line. It stops with
// fn's first error; with a *VerifyError at a line longer than maxReadLine (ErrLineTooLong) or a last line
// without its trailing newline (ErrTornLine); or with the read error. It returns nil at the end of r.
func eachLine(r io.Reader, fn func(n int, line []byte, last bool) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var buf []byte
	for n := 1; ; n++ {
		line, long, err := readLine(br, buf)
		if long {
			return tooLong(n)
		}
		buf = line
		if errors.Is(err, io.EOF) {
			if len(line) == 0 {
				return nil
			}
			return &VerifyError{Line: n, Reason: "torn line: no trailing newline", Err: ErrTornLine}
		}
		if err != nil {
			return fmt.Errorf("read audit log: %w", err)
		}
		_, peekErr := br.Peek(1)
		if err := fn(n, line[:len(line)-1], errors.Is(peekErr, io.EOF)); err != nil {
			return err
		}
	}
}

// checkLine verifies line n given the hash of line n-1 and returns its record. The record's Raw aliases
// line.
func checkLine(n int, line []byte, prev string, last bool) (Record, *VerifyError) {
	broken := func(format string, args ...any) *VerifyError {
		return &VerifyError{Line: n, Reason: fmt.Sprintf(format, args...), Err: ErrChainBroken}
	}
	rec, err := decodeRecord(line)
	if err != nil {
		var dup *duplicateError
		if errors.As(err, &dup) {
			return rec, broken("%s", dup.reason())
		}
		if last {
			return rec, &VerifyError{Line: n, Reason: "torn line: not a valid JSON record", Err: ErrTornLine}
		}
		return rec, broken("not a valid JSON record")
	}
	body, stored, ok := splitHash(line)
	if !ok {
		return rec, broken("hash member missing or not last")
	}
	if sha256hex.Of(body) != stored || rec.Hash != stored {
		return rec, broken("hash mismatch: the line was edited")
	}
	if rec.Seq != int64(n) {
		return rec, broken("seq %d, want %d: a line was deleted, inserted or reordered", rec.Seq, n)
	}
	if rec.Prev != prev {
		if n == 1 {
			return rec, broken("prev is not the zero hash: the log does not start here")
		}
		return rec, broken("prev does not match line %d: a line before it was edited or deleted", n-1)
	}
	return rec, nil
}

// decodeRecord parses one line strictly: one JSON object with only the known members, each once and
// spelled exactly as the writer spells it, and no object in it with a key twice (checkKeys).
func decodeRecord(line []byte) (Record, error) {
	var rec Record
	if !json.Valid(line) {
		return rec, fmt.Errorf("%w: not valid JSON", ErrChainBroken)
	}
	if err := checkKeys(line); err != nil {
		return rec, err
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil {
		return rec, fmt.Errorf("%w: %w", ErrChainBroken, err)
	}
	rec.Raw = line
	return rec, nil
}

// recordMembers are the top-level member names of a line, as the writer spells them (Record's tags).
var recordMembers = map[string]bool{"seq": true, "time": true, "request_id": true, "event": true, "tool": true,
	"fields": true, "prev": true, "hash": true}

// duplicateError is a line that names one member twice, or a top-level member in another spelling.
type duplicateError struct {
	topLevel bool
	unknown  bool
}

func (e *duplicateError) Error() string { return fmt.Sprintf("%s: %s", ErrChainBroken, e.reason()) }

func (e *duplicateError) Unwrap() error { return ErrChainBroken }

// reason says what is wrong without quoting the key, which the line's writer chose.
func (e *duplicateError) reason() string {
	switch {
	case e.unknown:
		return "a top-level member that is not one of the record's (or not spelled as the writer spells it): readers would not agree on what the line says"
	case e.topLevel:
		return "a top-level member given twice: readers would not agree on what the line says"
	}
	return "an object in its fields names a key twice: readers would not agree on what the line says"
}

// checkKeys refuses a line that JSON readers would read differently. encoding/json matches member names
// case-insensitively and lets the last of duplicate members win, other readers (jq, `audit show --json`)
// keep another or refuse: a line with "event" and "Event" would verify as one event and be shown as
// another. So every top-level member must be one of the record's, spelled exactly as the writer spells it,
// and given once; and no object at any depth may name a key twice. Within fields, keys that differ only in
// case are distinct (a map keeps them apart, and an agent's arguments may have them), so only exact
// duplicates are refused there. The writer encodes Go maps and structs, which never repeat a key.
func checkKeys(line []byte) error {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	// One entry per open object or array: the object's keys seen so far (nil for an array), and whether
	// the next string token in it is a key.
	type frame struct {
		keys  map[string]bool
		isKey bool
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: %w", ErrChainBroken, err)
		}
		n := len(stack)
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{keys: map[string]bool{}, isKey: true})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:n-1]
		default:
			if n == 0 {
				continue // not an object: Decode refuses it
			}
			if top := stack[n-1]; top.keys != nil && top.isKey {
				key, _ := tok.(string)
				switch {
				case n == 1 && !recordMembers[key]:
					return &duplicateError{topLevel: true, unknown: true}
				case top.keys[key]:
					return &duplicateError{topLevel: n == 1}
				}
				top.keys[key], top.isKey = true, false
				continue
			}
		}
		// A value ended (a scalar, or an object or array just closed): in an object, a key comes next.
		if m := len(stack); m > 0 && stack[m-1].keys != nil {
			stack[m-1].isKey = true
		}
	}
}

// Filter selects records in Read. The zero Filter selects all.
type Filter struct {
	// RequestID, if set, keeps only the events of that request.
	RequestID string
}

func (f Filter) match(r Record) bool {
	return f.RequestID == "" || r.RequestID == f.RequestID
}

// Read decodes the records of a log that match filter, in file order. It does not check the chain (Verify
// does). It stops at the first line that is not a record and returns the records before it with a
// *VerifyError naming that line, so a log with a torn tail can still be shown. Like Verify, it refuses a
// line longer than twice MaxLineBytes without holding it in memory.
func Read(r io.Reader, filter Filter) ([]Record, error) {
	var out []Record
	err := eachLine(r, func(n int, line []byte, _ bool) error {
		rec, err := decodeRecord(bytes.Clone(line))
		if err != nil {
			return &VerifyError{Line: n, Reason: "not a valid JSON record", Err: ErrChainBroken}
		}
		if filter.match(rec) {
			out = append(out, rec)
		}
		return nil
	})
	return out, err
}

// VerifyFile runs Verify on the file at path while holding a shared lock on it, so that a line being
// appended concurrently is never mistaken for a torn one.
func VerifyFile(path string) (Summary, error) {
	var sum Summary
	err := withReadLock(path, func(f *os.File) error {
		var err error
		sum, err = Verify(f)
		return err
	})
	return sum, err
}

// ReadFile runs Read on the file at path while holding a shared lock on it.
func ReadFile(path string, filter Filter) ([]Record, error) {
	var recs []Record
	err := withReadLock(path, func(f *os.File) error {
		var err error
		recs, err = Read(f, filter)
		return err
	})
	return recs, err
}

func withReadLock(path string, fn func(*os.File) error) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open audit log: %w", err)
	}
	defer f.Close()
	if err := lockFile(f, false); err != nil {
		return err
	}
	return fn(f)
}
