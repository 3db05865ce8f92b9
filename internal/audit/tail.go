package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"

	"github.com/agent-sandbox/agent-sandbox/internal/sha256hex"
)

// tailChunk is how much of the file syncTail reads at a time while looking for line boundaries backwards.
const tailChunk = 32 << 10

// syncTail brings seq, prev and size up to date with the file when the file's size is not what this Log
// last saw (another process appended, or a write of ours failed). A torn last line is truncated away and
// an EventRecovered line appended in its place. The caller holds l.mu and the exclusive flock. It reports
// whether it recovered a torn line.
func (l *Log) syncTail() (bool, error) {
	fi, err := l.f.Stat()
	if err != nil {
		return false, fmt.Errorf("stat audit log: %w", err)
	}
	size := fi.Size()
	if size == l.size {
		return false, nil
	}
	lastNL, err := lastIndexNewline(l.f, size)
	if err != nil {
		return false, err
	}
	complete := lastNL + 1 // bytes up to and including the last '\n'

	// Establish the chain from the last complete line before touching anything: a file whose last
	// complete line is not an audit record is not ours to truncate.
	seq, prev := int64(0), zeroHash
	if complete > 0 {
		start, err := lastIndexNewline(l.f, complete-1)
		if err != nil {
			return false, err
		}
		n := complete - 1 - (start + 1)
		if n > maxReadLine {
			// Not a line Write produced: refuse it rather than load it.
			return false, fmt.Errorf("last complete line is %d bytes, longer than %d: %w", n, maxReadLine, ErrChainBroken)
		}
		line := make([]byte, n)
		if _, err := l.f.ReadAt(line, start+1); err != nil {
			return false, fmt.Errorf("read last audit line: %w", err)
		}
		var rec struct {
			Seq int64 `json:"seq"`
		}
		if err := json.Unmarshal(line, &rec); err != nil || rec.Seq < 1 {
			return false, fmt.Errorf("last complete line is not an audit record: %w", ErrChainBroken)
		}
		seq, prev = rec.Seq, sha256hex.Of(line)
	}

	var tornBytes int64
	var tornSum string
	if complete < size {
		tornBytes = size - complete
		h := sha256.New()
		if _, err := io.Copy(h, io.NewSectionReader(l.f, complete, tornBytes)); err != nil {
			return false, fmt.Errorf("read torn audit line: %w", err)
		}
		tornSum = hex.EncodeToString(h.Sum(nil))
		if err := l.f.Truncate(complete); err != nil {
			return false, fmt.Errorf("truncate torn audit line: %w", err)
		}
		if l.sync {
			if err := l.f.Sync(); err != nil {
				return false, fmt.Errorf("sync audit log: %w", err)
			}
		}
	}
	l.seq, l.prev, l.size = seq, prev, complete
	if tornBytes == 0 {
		return false, nil
	}
	err = l.append(Event{Name: EventRecovered}, map[string]any{
		FieldTornBytes:  tornBytes,
		FieldTornSHA256: tornSum,
	})
	if err != nil {
		return true, fmt.Errorf("record torn line recovery: %w", err)
	}
	return true, nil
}

// lastIndexNewline returns the offset of the last '\n' in the first end bytes of r, or -1.
func lastIndexNewline(r io.ReaderAt, end int64) (int64, error) {
	buf := make([]byte, tailChunk)
	for end > 0 {
		n := int64(len(buf))
		if n > end {
			n = end
		}
		chunk := buf[:n]
		if _, err := r.ReadAt(chunk, end-n); err != nil {
			return 0, fmt.Errorf("read audit log tail: %w", err)
		}
		if i := bytes.LastIndexByte(chunk, '\n'); i >= 0 {
			return end - n + int64(i), nil
		}
		end -= n
	}
	return -1, nil
}
