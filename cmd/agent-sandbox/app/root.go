// Package app holds the agent-sandbox command tree. Every subcommand binds its flags into an Options struct
// with Complete (defaults), Validate (aggregated errors) and Run(ctx) error; nothing here calls os.Exit.
//
// The commands live in one package per trust role (docs/architecture.md), so that each links only what
// its role needs (internal/contract/layout_test.go checks it):
//
//	cluster    in the cluster or installing it, trusted: webhook, check-install, preflight, vault, policy
//	sandboxed  inside a sandbox Pod: run (the tool entry points), cred-agent
//	approver   the approver's side, a person at a terminal: approve, approvals, deny, keygen, keys
//	auditor    the operator's audit: audit show, audit verify
//	agent      beside the agent, not trusted: mcp, kubeconfig refresh
//
// cli is the plumbing they share: streams, exit codes, usage errors, -o, JSON, --log-level. This package
// is only the root, which wires them all, and the version command.
package app

import (
	"context"
	"io"

	"github.com/spf13/cobra"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/agent"
	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/approver"
	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/auditor"
	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/cli"
	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/cluster"
	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/sandboxed"
)

// Main runs the command line and returns the process exit code. Errors are printed once, as one line, on
// stderr: never a stack trace.
func Main(ctx context.Context, args []string, in io.Reader, out, errOut io.Writer) int {
	cmd := NewRootCommand(cli.IO{In: in, Out: out, ErrOut: errOut})
	return cli.Main(ctx, cmd, args, errOut, approver.ExitCode, auditor.ExitCode)
}

// NewRootCommand builds the full command tree.
func NewRootCommand(streams cli.IO) *cobra.Command {
	root := &cobra.Command{
		Use:   "agent-sandbox",
		Short: "Run AI agents' infrastructure commands in gVisor sandboxes with per-action credentials and human approval",
		Long: `agent-sandbox lets AI coding agents run real infrastructure commands against a Kubernetes cluster
without holding a standing credential. Each tool call runs as one throwaway Kubernetes Job under gVisor;
an admission webhook enforces the policy; Vault mints a credential per action; destructive actions wait
for a human to approve them with a signed token.`,
		Version: versionInfo().String(),
		RunE:    func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	// --version prints the same line as the version command.
	root.SetVersionTemplate("{{.Version}}\n")
	cli.SetupRoot(root, streams)
	root.AddCommand(
		cluster.NewPolicyCommand(streams),
		approver.NewKeygenCommand(streams),
		approver.NewKeysCommand(streams),
		approver.NewApprovalsCommand(streams),
		approver.NewApproveCommand(streams),
		approver.NewDenyCommand(streams),
		auditor.NewAuditCommand(streams),
		newVersionCommand(streams),
		cluster.NewWebhookCommand(streams),
		cluster.NewCheckInstallCommand(streams),
		cluster.NewVaultCommand(streams),
		sandboxed.NewCredAgentCommand(streams),
		sandboxed.NewRunCommand(streams, Main),
		agent.NewMCPCommand(streams, versionInfo().Version),
		agent.NewKubeconfigCommand(streams),
		cluster.NewPreflightCommand(streams),
	)
	return root
}
