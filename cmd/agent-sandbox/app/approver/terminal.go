package approver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/term"

	"github.com/agent-sandbox/agent-sandbox/internal/screen"
)

// noTerminalMessage is what approve says, on one line, when its standard input is not a terminal.
const noTerminalMessage = "approve needs an interactive terminal: approvals are made by a person, not by a program"

// maxConfirmationLength bounds the confirmation line read from the terminal.
const maxConfirmationLength = 256

// terminalOf returns in as a file if it is an interactive terminal.
func terminalOf(in io.Reader) (*os.File, bool) {
	f, ok := in.(*os.File)
	if !ok || f == nil || !term.IsTerminal(int(f.Fd())) {
		return nil, false
	}
	return f, true
}

// readFromTerminal runs read (which blocks on the terminal) so that a cancelled context (Ctrl-C, which the
// root command turns into cancellation) returns at once and leaves the terminal as it was, echo included.
func readFromTerminal[T any](ctx context.Context, tty *os.File, read func() (T, error)) (T, error) {
	var zero T
	fd := int(tty.Fd())
	state, err := term.GetState(fd)
	if err != nil {
		return zero, fmt.Errorf("read terminal state: %w", err)
	}
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := read()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		_ = term.Restore(fd, state)
		return zero, ctx.Err()
	}
}

// readLine reads one line from the terminal a byte at a time, so that nothing typed after the newline (the
// passphrase, say) is swallowed by a buffer.
func readLine(ctx context.Context, tty *os.File) (string, error) {
	return readFromTerminal(ctx, tty, func() (string, error) {
		var line []byte
		one := make([]byte, 1)
		for {
			n, err := tty.Read(one)
			if n == 1 {
				if one[0] == '\n' {
					return strings.TrimRight(string(line), "\r"), nil
				}
				if len(line) < maxConfirmationLength {
					line = append(line, one[0])
				}
			}
			if errors.Is(err, io.EOF) {
				return "", errors.New("end of input")
			}
			if err != nil {
				return "", fmt.Errorf("read terminal: %w", err)
			}
		}
	})
}

// readPassphrase prompts on out and reads a passphrase from the terminal without echo.
func readPassphrase(ctx context.Context, tty *os.File, out io.Writer, prompt string) ([]byte, error) {
	fmt.Fprint(out, prompt)
	p, err := readFromTerminal(ctx, tty, func() ([]byte, error) { return term.ReadPassword(int(tty.Fd())) })
	fmt.Fprintln(out)
	if err != nil {
		return nil, fmt.Errorf("read passphrase: %w", err)
	}
	return p, nil
}

// pageTo writes text to out, below above (already on the screen). When out is a terminal it pages, so that
// nothing scrolls past before it is read: after each screenful (the terminal's height, else
// screen.DefaultPageLines) it waits for Enter on tty. Anywhere else it writes everything at once. Nothing
// is ever left out.
func pageTo(ctx context.Context, out io.Writer, tty *os.File, above, text string) error {
	f, ok := out.(*os.File)
	if !ok || f == nil || tty == nil || !term.IsTerminal(int(f.Fd())) {
		_, err := io.WriteString(out, text)
		return err
	}
	width, height, err := term.GetSize(int(f.Fd()))
	if err != nil {
		width, height = 0, 0
	}
	p := &screen.Pager{Out: out, Rows: height, Width: width, Next: func() error {
		if _, err := readLine(ctx, tty); err != nil {
			return fmt.Errorf("read Enter for the next page: %w", err)
		}
		return nil
	}}
	return p.Page(above, text)
}
