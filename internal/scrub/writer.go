package scrub

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
)

// MaxLineBytes bounds the lines the Writer scrubs: a longer line is cut, at most this many bytes of it
// are kept, and the rest of it is dropped.
const MaxLineBytes = 1 << 20

// cutMarker ends a line that was cut at MaxLineBytes.
var cutMarker = fmt.Sprintf("<truncated:line-longer-than-%d-bytes>", MaxLineBytes)

// ErrClosed is returned by the Writer's Write after Close.
var ErrClosed = errors.New("scrub writer closed")

// Writer returns a writer that scrubs what is written to it line by line and passes the result to w;
// it wraps the output of a tool that runs with a credential (Terraform in the sandbox). Text is held
// back until its line is complete, so a secret split across two Write calls is still caught whole.
//
//   - A line longer than MaxLineBytes is cut: its first MaxLineBytes bytes are scrubbed, the trailing
//     run of token characters (and any tail that could begin an exact value) is dropped as it may be
//     part of a secret cut in two, the marker "<truncated:line-longer-than-1048576-bytes>" and a newline
//     are written, and the rest of the line is discarded up to its newline. Memory stays bounded.
//   - A PEM block spans lines: from a BEGIN line that its line does not close, "<redacted:pem>" is
//     written once and the following lines are dropped up to and including the END marker, as String
//     does for the whole text. A BEGIN without an END therefore hides the rest of the output.
//
// Close writes the scrubbed last line if it had no newline; it does not close w. The writer is safe for
// concurrent use; a write error from w is returned by every later call.
func (s *Scrubber) Writer(w io.Writer) io.WriteCloser {
	return &lineWriter{s: s, w: w}
}

type lineWriter struct {
	s *Scrubber
	w io.Writer

	mu     sync.Mutex
	line   []byte // the current line so far, without its newline; never more than MaxLineBytes
	cut    bool   // the current line was cut; its rest is being discarded
	inPEM  bool   // inside a PEM block that began on an earlier line
	closed bool
	err    error // the first error from w
}

// Write implements io.Writer. It reports all of p as written unless w failed.
func (lw *lineWriter) Write(p []byte) (int, error) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.closed {
		return 0, ErrClosed
	}
	if lw.err != nil {
		return 0, lw.err
	}
	n := len(p)
	for len(p) > 0 && lw.err == nil {
		chunk, rest, nl := bytes.Cut(p, []byte{'\n'})
		p = rest
		if lw.cut {
			// The cut line's newline was written with its marker.
			lw.cut = !nl
			continue
		}
		if room := MaxLineBytes - len(lw.line); len(chunk) > room {
			lw.line = append(lw.line, chunk[:room]...)
			lw.emitCut()
			lw.line = lw.line[:0]
			lw.cut = !nl
			continue
		}
		lw.line = append(lw.line, chunk...)
		if nl {
			lw.emit(string(lw.line), true)
			lw.line = lw.line[:0]
		}
	}
	if lw.err != nil {
		return 0, lw.err
	}
	return n, nil
}

// Close writes the last line if it is incomplete. It does not close the underlying writer.
func (lw *lineWriter) Close() error {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.closed {
		return lw.err
	}
	lw.closed = true
	if lw.err == nil && len(lw.line) > 0 {
		lw.emit(string(lw.line), false)
	}
	lw.line = nil
	return lw.err
}

// emit scrubs one line and writes it, with a newline if it had one.
func (lw *lineWriter) emit(line string, nl bool) {
	out, ok := lw.scrubLine(line)
	if !ok {
		return
	}
	if nl {
		out += "\n"
	}
	lw.write(out)
}

// emitCut writes the kept part of a line longer than MaxLineBytes, and the marker.
func (lw *lineWriter) emitCut() {
	out, ok := lw.scrubLine(string(lw.line))
	if !ok {
		return
	}
	lw.write(lw.s.trimCutTail(out) + cutMarker + "\n")
}

// scrubLine scrubs one line, following PEM blocks across lines. ok is false for a line to drop.
func (lw *lineWriter) scrubLine(line string) (out string, ok bool) {
	if lw.inPEM {
		loc := pemEndRE.FindStringIndex(line)
		if loc == nil {
			return "", false
		}
		lw.inPEM = false
		line = line[loc[1]:]
		if line == "" {
			return "", false
		}
	}
	out, lw.inPEM = lw.s.scrub(line)
	return out, true
}

func (lw *lineWriter) write(s string) {
	n, err := io.WriteString(lw.w, s)
	if err == nil && n < len(s) {
		err = io.ErrShortWrite
	}
	lw.err = err
}

// trimCutTail drops what may be the first part of a secret that a cut split in two: the trailing run
// of characters that occur in tokens and their encodings, and any tail that is the beginning of an
// exact value's form.
func (s *Scrubber) trimCutTail(out string) string {
	i := len(out)
	for i > 0 && isTokenByte(out[i-1]) {
		i--
	}
	out = out[:i]
	if s == nil {
		return out
	}
	for _, f := range s.forms {
		for k := min(len(f)-1, len(out)); k > 0; k-- {
			if strings.HasSuffix(out, f[:k]) {
				out = out[:len(out)-k]
				break
			}
		}
	}
	return out
}

func isTokenByte(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("._~+/=%\\-", c) >= 0
}
