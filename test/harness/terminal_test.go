package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestTerminalDrivesACommand plays the approve dialogue with a shell: a page to turn, a confirmation, and a
// passphrase read without echo. The terminal turns the page itself, types the passphrase only once echo is
// off, and Wait gives the command's exit status after all it wrote.
func TestTerminalDrivesACommand(t *testing.T) {
	script := `printf 'page 1\n-- more: line 1 of 2, Enter for the next page --'; read page
printf 'To approve, type the request ID (req-1) or "yes": '; read answer
printf 'Passphrase for approver key k: '; stty -echo; read pass; stty echo; echo
echo "answer=$answer pass=$pass"; exit 3`
	term, err := StartTerminalCommand(exec.Command("sh", "-c", script), TurnPages())
	if err != nil {
		t.Skipf("no pseudo-terminal available: %v", err)
	}
	defer term.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := term.Expect(ctx, "page 1", `or "yes": `); err != nil {
		t.Fatalf("%v\n%s", err, term.Output())
	}
	if err := term.Type("req-1\n"); err != nil {
		t.Fatal(err)
	}
	if err := term.Expect(ctx, "Passphrase for approver key", ": "); err != nil {
		t.Fatalf("%v\n%s", err, term.Output())
	}
	if err := term.TypeSecret(ctx, "s3cret\n"); err != nil {
		t.Fatal(err)
	}
	code, err := term.Wait(ctx)
	var exit *exec.ExitError
	if code != 3 || !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("Wait = %d, %v; want 3 and an *exec.ExitError", code, err)
	}
	out := term.Output()
	if !strings.Contains(out, "answer=req-1 pass=s3cret") {
		t.Errorf("the command did not read what was typed:\n%q", out)
	}
	if strings.Count(out, "s3cret") != 1 {
		t.Errorf("the passphrase was echoed:\n%q", out)
	}
}

// TestTerminalProgramEnded: a program that ends without showing what is expected ends the wait with
// ErrProgramEnded, and what it wrote last is there once Wait returns.
func TestTerminalProgramEnded(t *testing.T) {
	s := StartTestTerminal(t, func(tty *os.File) int {
		fmt.Fprint(tty, "refused: exit 4\r\n")
		return 4
	})
	if s.Shows("Passphrase") {
		t.Fatalf("Shows saw what was never written:\n%s", s.Output())
	}
	if code := s.Wait(); code != 4 {
		t.Fatalf("exit %d", code)
	}
	if !strings.Contains(s.Output(), "refused: exit 4") {
		t.Errorf("the output is not all there after Wait: %q", s.Output())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.term.Expect(ctx, "exit 4", "refused"); !errors.Is(err, ErrProgramEnded) {
		t.Errorf("Expect of what was shown out of order: %v, want ErrProgramEnded", err)
	}
}
