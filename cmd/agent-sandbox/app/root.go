// Package app holds the agent-sandbox command tree. Every subcommand binds its flags into an Options struct
// with Complete (defaults), Validate (aggregated errors) and Run(ctx) error; nothing here calls os.Exit.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/audit"
)

// IO carries the standard streams so that commands can be driven from tests.
type IO struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer
}

// exitError lets a command choose its exit code without printing anything more (it already explained itself).
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// Exit codes, the same for every command: 0 success, 1 failure, and these. exitCodesHelp documents them
// at the end of every command's --help; change both together.
const (
	// exitUsage: the command line is wrong (unknown flag, missing argument, invalid value).
	exitUsage = 2
	// exitNotFound: the thing named does not exist (an approval request, the approvals database, a file).
	exitNotFound = 3
	// exitTampered: something was changed behind the program's back (a forged plan description, an
	// edited, cut or rewritten audit log).
	exitTampered = 4
)

const exitCodesHelp = `
Exit status:
  0  success
  1  failure (a cluster, Vault or file error; a request that cannot be decided)
  2  usage error: unknown command or flag, missing argument, invalid value
  3  not found: no such approval request, no approvals database, no audit log
  4  tampered: an edited, cut or rewritten audit log, a saved plan that does not match its request
`

// usageError is a mistake in the command line.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// notFoundError is a missing thing the user named (or left to a default): a file such as the audit log.
// Only errors wrapped in it exit 3, not every fs.ErrNotExist: a missing kubeconfig while approving, say,
// is a failure to verify, not an answer to "does it exist".
type notFoundError struct{ err error }

func (e notFoundError) Error() string { return e.err.Error() }
func (e notFoundError) Unwrap() error { return e.err }

// usage marks the errors of a positional-argument check as usage errors.
func usage(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}

// Main runs the command line and returns the process exit code. Errors are printed once, as one line, on
// stderr: never a stack trace.
func Main(ctx context.Context, args []string, in io.Reader, out, errOut io.Writer) int {
	cmd := NewRootCommand(IO{In: in, Out: out, ErrOut: errOut})
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var ee exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	fmt.Fprintf(errOut, "error: %v\n", err)
	var ue usageError
	switch {
	case errors.As(err, &ue):
		return exitUsage
	case errors.Is(err, approval.ErrNotFound), errors.Is(err, approval.ErrNoDatabase), errors.As(err, new(notFoundError)):
		return exitNotFound
	case errors.As(err, new(*audit.VerifyError)):
		return exitTampered
	}
	return 1
}

// NewRootCommand builds the full command tree.
func NewRootCommand(streams IO) *cobra.Command {
	root := &cobra.Command{
		Use:   "agent-sandbox",
		Short: "Run AI agents' infrastructure commands in gVisor sandboxes with per-action credentials and human approval",
		Long: `agent-sandbox lets AI coding agents run real infrastructure commands against a Kubernetes cluster
without holding a standing credential. Each tool call runs as one throwaway Kubernetes Job under gVisor;
an admission webhook enforces the policy; Vault mints a credential per action; destructive actions wait
for a human to approve them with a signed token.`,
		Version:       versionInfo().String(),
		SilenceUsage:  true,
		SilenceErrors: true,
		// An unknown command is a usage error (exit 2) like an unknown flag; without Args cobra reports it as
		// a plain error.
		Args: usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	// --version prints the same line as the version command.
	root.SetVersionTemplate("{{.Version}}\n")
	// Every command's help ends with the exit codes; subcommands inherit the template.
	root.SetHelpTemplate(root.HelpTemplate() + exitCodesHelp)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	root.AddCommand(
		newPolicyCommand(streams),
		newKeygenCommand(streams),
		newKeysCommand(streams),
		newApprovalsCommand(streams),
		newApproveCommand(streams),
		newDenyCommand(streams),
		newAuditCommand(streams),
		newVersionCommand(streams),
		newWebhookCommand(streams),
		newCheckInstallCommand(streams),
		newVaultCommand(streams),
		newCredAgentCommand(streams),
		newRunCommand(streams),
		newMCPCommand(streams),
		newKubeconfigCommand(streams),
		newPreflightCommand(streams),
	)
	return root
}
