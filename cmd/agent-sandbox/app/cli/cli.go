// Package cli is the plumbing every agent-sandbox command shares, whatever its trust role: the standard
// streams, the exit codes and the errors that choose them, the root command's settings, the -o flag, JSON
// output, --log-level and loading the kubeconfig a person names. It imports nothing of agent-sandbox, so
// that linking it gives a role's commands nothing they have no business with
// (internal/contract/layout_test.go checks it).
package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
)

// IO carries the standard streams so that commands can be driven from tests.
type IO struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer
}

// ExitError lets a command choose its exit code without printing anything more (it already explained itself).
type ExitError struct{ Code int }

func (e ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// Exit codes, the same for every command: 0 success, 1 failure, and these. ExitCodesHelp documents them
// at the end of every command's --help; change both together.
const (
	// ExitUsage: the command line is wrong (unknown flag, missing argument, invalid value).
	ExitUsage = 2
	// ExitNotFound: the thing named does not exist (an approval request, the approvals database, a file).
	ExitNotFound = 3
	// ExitTampered: something was changed behind the program's back (a forged plan description, an
	// edited, cut or rewritten audit log).
	ExitTampered = 4
)

// ExitCodesHelp ends every command's --help.
const ExitCodesHelp = `
Exit status:
  0  success
  1  failure (a cluster, Vault or file error; a request that cannot be decided)
  2  usage error: unknown command or flag, missing argument, invalid value
  3  not found: no such approval request, no approvals database, no audit log
  4  tampered: an edited, cut or rewritten audit log, a saved plan that does not match its request
`

// UsageError is a mistake in the command line.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// NotFoundError is a missing thing the user named (or left to a default): a file such as the audit log.
// Only errors wrapped in it exit 3, not every fs.ErrNotExist: a missing kubeconfig while approving, say,
// is a failure to verify, not an answer to "does it exist".
type NotFoundError struct{ Err error }

func (e NotFoundError) Error() string { return e.Err.Error() }
func (e NotFoundError) Unwrap() error { return e.Err }

// Usage marks the errors of a positional-argument check as usage errors.
func Usage(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return UsageError{err}
		}
		return nil
	}
}

// SetupRoot gives a root command what every agent-sandbox command tree has: errors printed once, by Main,
// and no usage dump after them; an unknown command or flag as a usage error (exit 2) — without Args cobra
// reports an unknown command as a plain error; the exit codes at the end of every command's help
// (subcommands inherit the template); and the streams.
func SetupRoot(root *cobra.Command, streams IO) {
	root.SilenceUsage = true
	root.SilenceErrors = true
	if root.Args == nil {
		root.Args = Usage(cobra.NoArgs)
	}
	root.SetHelpTemplate(root.HelpTemplate() + ExitCodesHelp)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return UsageError{err} })
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
}

// MainFunc is an entry point: the binary's app.Main, or MainOf's.
type MainFunc func(ctx context.Context, args []string, in io.Reader, out, errOut io.Writer) int

// MainOf is the entry point of a root command named agent-sandbox that holds what cmds builds, set up as the
// binary's root is (SetupRoot) and exiting as Main does with codes. The role packages' tests run their
// commands through it, the way the binary runs them.
func MainOf(cmds func(IO) []*cobra.Command, codes ...func(error) (int, bool)) MainFunc {
	return func(ctx context.Context, args []string, in io.Reader, out, errOut io.Writer) int {
		streams := IO{In: in, Out: out, ErrOut: errOut}
		root := &cobra.Command{Use: "agent-sandbox"}
		SetupRoot(root, streams)
		root.AddCommand(cmds(streams)...)
		return Main(ctx, root, args, errOut, codes...)
	}
}

// Capture runs m with args and empty standard input, and returns its exit code and what it wrote.
func (m MainFunc) Capture(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = m(context.Background(), args, strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}

// Main runs root with args and returns the process exit code. Errors are printed once, as one line, on
// errOut: never a stack trace. An ExitError, a UsageError and a NotFoundError choose their codes; codes
// (each role's own errors, such as a missing approval request) are asked next, in order; anything else
// exits 1.
func Main(ctx context.Context, root *cobra.Command, args []string, errOut io.Writer, codes ...func(error) (int, bool)) int {
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var ee ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	fmt.Fprintf(errOut, "error: %v\n", err)
	switch {
	case errors.As(err, new(UsageError)):
		return ExitUsage
	case errors.As(err, new(NotFoundError)):
		return ExitNotFound
	}
	for _, code := range codes {
		if c, ok := code(err); ok {
			return c
		}
	}
	return 1
}

// EnvOr is the environment variable name, else def.
func EnvOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
