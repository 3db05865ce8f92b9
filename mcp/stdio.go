package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Limits of one message read over stdio.
const (
	// DefaultMaxMessageBytes bounds one JSON-RPC message (one line) read over stdio. A tool call's
	// arguments are a few short strings; nothing an agent legitimately sends comes near it.
	DefaultMaxMessageBytes = 1 << 20
	// DefaultMaxMessageDepth bounds how deeply one message's objects and arrays nest. An MCP message nests
	// a handful of levels.
	DefaultMaxMessageDepth = 64
)

// StdioLimits bound what one message read over stdio may be. Zero values select the defaults.
type StdioLimits struct {
	// MaxMessageBytes is the longest line (one message, without its newline) the server reads.
	MaxMessageBytes int
	// MaxDepth is the deepest nesting of objects and arrays a message may have.
	MaxDepth int
}

func (l StdioLimits) withDefaults() StdioLimits {
	if l.MaxMessageBytes <= 0 {
		l.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = DefaultMaxMessageDepth
	}
	return l
}

// RunStdio serves one client over stdin/stdout until it disconnects or ctx ends.
func RunStdio(ctx context.Context, s *sdk.Server, limits StdioLimits) error {
	return ServeIO(ctx, s, os.Stdin, os.Stdout, limits)
}

// ServeIO serves one client over newline-delimited JSON-RPC on in and out (stdio), until in ends or ctx
// does.
//
// The SDK's stdio connection ends the whole session on the first message it cannot decode (invalid JSON,
// a message nested deeper than its parser allows, a value that is not a JSON-RPC message, a batch under a
// protocol version without batches): one bad line from a hostile agent would stop the server. So every
// line is checked here first, with the same decoder the SDK uses, and a line the SDK would die on is
// answered here with a JSON-RPC error (parse error -32700 for invalid JSON, invalid request -32600 for the
// rest; the id is the message's own when it can be read, else null) and not passed on. The session goes on
// serving. ServeIO closes in when it returns (unless in is os.Stdin). Lines longer than limits.MaxMessageBytes are refused without being held in memory, and
// batches (JSON arrays) are refused: MCP dropped them in 2025-06-18, and the SDK would end the session on
// one sent under a later version.
func ServeIO(ctx context.Context, s *sdk.Server, in io.Reader, out io.Writer, limits StdioLimits) error {
	limits = limits.withDefaults()
	w := &lockedWriter{w: out}
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		pw.CloseWithError(filterMessages(in, pw, w, limits))
	}()
	// The SDK's own frame limit stays above ours, so that ours answers first.
	err := s.Run(ctx, &sdk.IOTransport{Reader: pr, Writer: nopWriteCloser{w}, MaxLineLength: limits.MaxMessageBytes + 64})
	// Unblock the filter if it waits to hand on a line, and, unless in is this process's stdin (whose read a
	// close does not interrupt; the process is ending), if it waits on in.
	_ = pr.Close()
	if c, ok := in.(io.Closer); ok && in != io.Reader(os.Stdin) {
		_ = c.Close()
		<-done
	}
	return err
}

// lockedWriter serialises the SDK's responses and the filter's error responses: each Write is one whole
// line.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// filterMessages copies the good lines of in to pass and answers the bad ones on reply, until in ends (nil)
// or fails, or pass is closed.
func filterMessages(in io.Reader, pass io.Writer, reply io.Writer, limits StdioLimits) error {
	br := bufio.NewReaderSize(in, 64<<10)
	for {
		line, tooLong, readErr := readLine(br, limits.MaxMessageBytes)
		var answer []byte
		switch {
		case tooLong:
			answer = errorResponse(nil, jsonrpc.CodeInvalidRequest,
				fmt.Sprintf("message refused: longer than %d bytes (one JSON-RPC message per line)", limits.MaxMessageBytes))
		default:
			line = bytes.TrimSpace(line)
			if len(line) == 0 {
				break
			}
			if answer = checkMessage(line, limits.MaxDepth); answer == nil {
				if _, err := pass.Write(append(line, '\n')); err != nil {
					return err
				}
			}
		}
		if answer != nil {
			if _, err := reply.Write(answer); err != nil {
				return err
			}
		}
		if readErr != nil {
			if errors.Is(readErr, io.EOF) {
				return nil
			}
			return readErr
		}
	}
}

// readLine reads one line without its newline. A line longer than max is consumed to its end but not kept:
// tooLong reports it.
func readLine(br *bufio.Reader, max int) (line []byte, tooLong bool, err error) {
	for {
		frag, err := br.ReadSlice('\n')
		if !tooLong {
			n := len(frag)
			if n > 0 && frag[n-1] == '\n' {
				n--
			}
			if len(line)+n > max {
				tooLong, line = true, nil
			} else {
				line = append(line, frag[:n]...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return line, tooLong, err
	}
}

// checkMessage returns nil for a line the SDK can take, else the error response to send for it.
func checkMessage(line []byte, maxDepth int) []byte {
	if d := depth(line, maxDepth); d > maxDepth {
		return errorResponse(idOf(line), jsonrpc.CodeInvalidRequest,
			fmt.Sprintf("message refused: objects and arrays nested deeper than %d", maxDepth))
	}
	if !json.Valid(line) {
		return errorResponse(nil, jsonrpc.CodeParseError, "parse error: the line is not valid JSON (one JSON-RPC message per line)")
	}
	switch line[0] {
	case '{':
	case '[':
		return errorResponse(nil, jsonrpc.CodeInvalidRequest, "invalid request: JSON-RPC batches are not supported; send one message per line")
	default:
		return errorResponse(nil, jsonrpc.CodeInvalidRequest, "invalid request: a JSON-RPC message is a JSON object")
	}
	if _, err := jsonrpc.DecodeMessage(line); err != nil {
		return errorResponse(idOf(line), jsonrpc.CodeInvalidRequest, "invalid request: "+err.Error())
	}
	return nil
}

// depth is how deeply line's objects and arrays nest, counted up to limit+1 (strings skipped).
func depth(line []byte, limit int) int {
	d, most := 0, 0
	inString, escaped := false, false
	for _, b := range line {
		if inString {
			switch {
			case escaped:
				escaped = false
			case b == '\\':
				escaped = true
			case b == '"':
				inString = false
			}
			continue
		}
		switch b {
		case '"':
			inString = true
		case '{', '[':
			if d++; d > most {
				most = d
				if most > limit {
					return most
				}
			}
		case '}', ']':
			d--
		}
	}
	return most
}

// idOf is the id of a JSON-RPC request, when line is an object whose id is a string or a number; else nil.
func idOf(line []byte) json.RawMessage {
	if len(line) == 0 || line[0] != '{' {
		return nil
	}
	var m struct {
		ID json.RawMessage `json:"id"`
	}
	if json.Unmarshal(line, &m) != nil || len(m.ID) == 0 {
		return nil
	}
	switch m.ID[0] {
	case '"', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return m.ID
	}
	return nil
}

// errorResponse is one line holding a JSON-RPC error response with id (null when nil).
func errorResponse(id json.RawMessage, code int, message string) []byte {
	if id == nil {
		id = json.RawMessage("null")
	}
	b, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}{JSONRPC: "2.0", ID: id, Error: struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{code, message}})
	return append(b, '\n')
}
