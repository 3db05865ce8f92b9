package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/agent-sandbox/agent-sandbox/internal/screen"
)

// Terminal is a program whose standard streams are a pseudo-terminal, driven the way a person at the
// keyboard drives it: what the program writes is kept, a caller waits until the screen shows a prompt and
// types the answer. `agent-sandbox approve` and `keygen` read the confirmation and the passphrase from a
// terminal only, never from a pipe, so this is how the unit tests, the integration tests and the demo
// (and through it the end-to-end tests) drive them. The program is either a function run in this process
// (StartTerminal) or a command (StartTerminalCommand).
type Terminal struct {
	ptmx  *os.File
	pages bool // turn every page of a long screen (TurnPages)

	mu      sync.Mutex
	out     bytes.Buffer
	scanned int           // how far out has been searched for pager prompts
	changed chan struct{} // closed, and replaced, whenever out grows or the reading ends

	readDone chan struct{} // the program's side of the terminal is closed and everything it wrote is read
	ended    chan struct{} // the program returned or exited; code and err are set
	code     int
	err      error
	command  bool
}

// TerminalOption changes how a Terminal answers the program.
type TerminalOption func(*Terminal)

// TurnPages makes the terminal read a long screen as a reader does: it types Enter at each
// "-- more: line X of Y, Enter for the next page --" of internal/screen's pager, as soon as it is shown.
func TurnPages() TerminalOption { return func(t *Terminal) { t.pages = true } }

// StartTerminal runs run in this process with a new pseudo-terminal as tty and returns at once; run's
// result is the program's exit code. The terminal's program side is closed when run returns.
func StartTerminal(run func(tty *os.File) int, opts ...TerminalOption) (*Terminal, error) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		return nil, fmt.Errorf("open a pseudo-terminal: %w", err)
	}
	t := newTerminal(ptmx, opts)
	go func() {
		t.code = run(tty)
		// Nothing reads the terminal once run has returned, so closing it cannot block; the reader then
		// drains what is left and ends.
		tty.Close()
		close(t.ended)
	}()
	return t, nil
}

// StartTerminalCommand starts cmd with a new pseudo-terminal as its standard streams (and controlling
// terminal) and returns at once.
func StartTerminalCommand(cmd *exec.Cmd, opts ...TerminalOption) (*Terminal, error) {
	ptmx, err := pty.Start(cmd)
	if err != nil {
		return nil, fmt.Errorf("start %s on a pseudo-terminal: %w", cmd.Path, err)
	}
	t := newTerminal(ptmx, opts)
	t.command = true
	go func() {
		t.err = cmd.Wait()
		t.code = cmd.ProcessState.ExitCode()
		close(t.ended)
	}()
	return t, nil
}

func newTerminal(ptmx *os.File, opts []TerminalOption) *Terminal {
	t := &Terminal{ptmx: ptmx, changed: make(chan struct{}), readDone: make(chan struct{}), ended: make(chan struct{})}
	for _, o := range opts {
		o(t)
	}
	go t.read()
	return t
}

// read keeps what the program writes until its side of the terminal is closed (a read error: EIO on
// Linux), turning pages if asked to.
func (t *Terminal) read() {
	buf := make([]byte, 4096)
	for {
		n, err := t.ptmx.Read(buf)
		t.mu.Lock()
		t.out.Write(buf[:n])
		pages := t.newPages()
		if err != nil {
			close(t.readDone)
		}
		close(t.changed)
		t.changed = make(chan struct{})
		t.mu.Unlock()
		for range pages {
			_, _ = t.ptmx.WriteString("\n")
		}
		if err != nil {
			return
		}
	}
}

// newPages counts the pager prompts shown since the last call, when pages are turned. t.mu is held.
func (t *Terminal) newPages() int {
	if !t.pages {
		return 0
	}
	shown := t.out.String()
	from := max(0, t.scanned-len(screen.NextPagePrompt)+1)
	n := strings.Count(shown[from:], screen.NextPagePrompt)
	t.scanned = len(shown)
	return n
}

// Output is everything the program has written so far, as the terminal shows it (line ends are "\r\n").
func (t *Terminal) Output() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.out.String()
}

// Expect waits until the screen shows each of want, one after the other in that order (want[1] after
// want[0], and so on). It fails when the program's side of the terminal is closed first or when ctx ends.
func (t *Terminal) Expect(ctx context.Context, want ...string) error {
	for {
		t.mu.Lock()
		shown, changed := t.out.String(), t.changed
		t.mu.Unlock()
		if showsInOrder(shown, want) {
			return nil
		}
		select {
		case <-t.readDone:
			if showsInOrder(t.Output(), want) {
				return nil
			}
			return fmt.Errorf("%w before the terminal showed %q", ErrProgramEnded, want)
		case <-ctx.Done():
			return fmt.Errorf("the terminal did not show %q: %w", want, ctx.Err())
		case <-changed:
		}
	}
}

// ErrProgramEnded is the error of an Expect that the program ended before: its side of the terminal was
// closed with the screen not showing what was expected.
var ErrProgramEnded = errors.New("the program ended")

func showsInOrder(shown string, want []string) bool {
	for _, w := range want {
		i := strings.Index(shown, w)
		if i < 0 {
			return false
		}
		shown = shown[i+len(w):]
	}
	return true
}

// Type writes text to the terminal as if typed on its keyboard ("\n" is Enter).
func (t *Terminal) Type(text string) error {
	if _, err := t.ptmx.WriteString(text); err != nil {
		return fmt.Errorf("type on the terminal: %w", err)
	}
	return nil
}

// TypeSecret types text (a passphrase) once the program has turned the terminal's echo off, as it does to
// read one: typed any earlier, right after the prompt is shown and before the program reads, it would be
// echoed where a person typing would not see it. It fails when the program ends first or when ctx ends
// (a program that never stops echoing, say).
func (t *Terminal) TypeSecret(ctx context.Context, text string) error {
	for {
		echo, err := t.echoes()
		if err != nil {
			return err
		}
		if !echo {
			return t.Type(text)
		}
		select {
		case <-t.ended:
			return fmt.Errorf("%w before it turned the terminal's echo off", ErrProgramEnded)
		case <-ctx.Done():
			return fmt.Errorf("the terminal still echoes what is typed: %w", ctx.Err())
		case <-time.After(5 * time.Millisecond):
			// The program's terminal settings change without a sign on the master side: look again.
		}
	}
}

// echoes reports whether the program's side of the terminal echoes what is typed. On Linux the master
// side reads the settings of the program's side.
func (t *Terminal) echoes() (bool, error) {
	sc, err := t.ptmx.SyscallConn()
	if err != nil {
		return false, err
	}
	var tios *unix.Termios
	if cerr := sc.Control(func(fd uintptr) { tios, err = unix.IoctlGetTermios(int(fd), unix.TCGETS) }); cerr != nil {
		return false, cerr
	}
	if err != nil {
		return false, fmt.Errorf("read the terminal's settings: %w", err)
	}
	return tios.Lflag&unix.ECHO != 0, nil
}

// Wait waits until the program has ended and everything it wrote is read, and returns its exit code and,
// for a command, what (*exec.Cmd).Wait returned (an *exec.ExitError when it exited with another code than
// 0). It fails with ctx's error when ctx ends first.
func (t *Terminal) Wait(ctx context.Context) (int, error) {
	for _, done := range []chan struct{}{t.ended, t.readDone} {
		select {
		case <-done:
		case <-ctx.Done():
			return -1, fmt.Errorf("the program on the terminal did not end: %w", ctx.Err())
		}
	}
	return t.code, t.err
}

// Close ends the session. A command is hung up on (closing the terminal sends it SIGHUP). A function run
// in this process cannot be interrupted, and a terminal it is reading cannot be closed: Close answers it
// with empty lines (the next page, a confirmation that does not match, a wrong passphrase) until it
// returns, for 30 seconds at the most.
func (t *Terminal) Close() error {
	if !t.command {
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
			select {
			case <-t.ended:
				deadline = time.Time{}
			case <-time.After(50 * time.Millisecond):
				_, _ = t.ptmx.WriteString("\n")
			}
		}
	}
	err := t.ptmx.Close()
	if !t.command {
		<-t.readDone
	}
	return err
}

// stepTimeout bounds each step of a TestTerminal: a guard against a test that hangs, not a timed assertion
// (approve, which describes a saved plan with terraform, answers in seconds).
const stepTimeout = 2 * time.Minute

// TestTerminal is a Terminal for a test: a step that fails (the program ended before the screen showed
// what the test waits for, or nothing happened for two minutes) fails the test with the screen in the
// message, and the terminal is closed when the test ends.
type TestTerminal struct {
	t    testing.TB
	term *Terminal
}

// StartTestTerminal runs run in this process on a new pseudo-terminal (see StartTerminal). The test is
// skipped where no pseudo-terminal can be opened.
func StartTestTerminal(t testing.TB, run func(tty *os.File) int, opts ...TerminalOption) *TestTerminal {
	t.Helper()
	term, err := StartTerminal(run, opts...)
	if err != nil {
		t.Skipf("no pseudo-terminal available: %v", err)
	}
	t.Cleanup(func() { _ = term.Close() })
	return &TestTerminal{t: t, term: term}
}

// Output is everything the program has written so far.
func (s *TestTerminal) Output() string { return s.term.Output() }

// Expect waits until the screen shows each of want, in that order.
func (s *TestTerminal) Expect(want ...string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	if err := s.term.Expect(ctx, want...); err != nil {
		s.t.Fatalf("%v; the terminal shows:\n%s", err, s.Output())
	}
}

// Shows waits until the screen shows want, and says whether it did before the program ended.
func (s *TestTerminal) Shows(want string) bool {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	err := s.term.Expect(ctx, want)
	if err != nil && !errors.Is(err, ErrProgramEnded) {
		s.t.Fatalf("%v; the terminal shows:\n%s", err, s.Output())
	}
	return err == nil
}

// Send types text on the terminal's keyboard.
func (s *TestTerminal) Send(text string) {
	s.t.Helper()
	if err := s.term.Type(text); err != nil {
		s.t.Fatal(err)
	}
}

// SendSecret types text once the terminal no longer echoes (see Terminal.TypeSecret): a passphrase.
func (s *TestTerminal) SendSecret(text string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	if err := s.term.TypeSecret(ctx, text); err != nil {
		s.t.Fatalf("%v; the terminal shows:\n%s", err, s.Output())
	}
}

// Wait waits until the program has ended and all it wrote is read, and returns its exit code.
func (s *TestTerminal) Wait() int {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	code, err := s.term.Wait(ctx)
	if err != nil {
		s.t.Fatalf("%v; the terminal shows:\n%s", err, s.Output())
	}
	return code
}
