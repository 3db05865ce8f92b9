package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/agent-sandbox/agent-sandbox/broker"
	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/cli"
	"github.com/agent-sandbox/agent-sandbox/internal/scrub"
)

// vaultDisableOptions are the flags of `vault disable`: those of `vault configure` that reach Vault and read
// the policy. It needs no kubeconfig: nothing in the cluster is read or changed.
type vaultDisableOptions struct {
	vaultAccess
	DryRun bool
}

func newVaultDisableCommand(streams cli.IO) *cobra.Command {
	o := &vaultDisableOptions{vaultAccess: vaultAccess{streams: streams, getenv: os.Getenv}}
	cmd := &cobra.Command{
		Use:   "disable",
		Short: "Make Vault refuse every sandbox login; run it before `helm uninstall` (idempotent; prints one line per change)",
		Long: `disable deletes, from the auth method and the secrets engine the policy names, every login role, every
secrets engine role and every ACL policy that agent-sandbox manages (named agent-sandbox-*), whether or not
the policy still lists their tools. From its first change on, Vault refuses every sandbox login.

Run it before ` + "`helm uninstall`" + `. While the chart is installed, its admission webhook is what keeps a
Vault-audience token for a tool's ServiceAccount out of reach of everybody but an admitted sandbox Pod. The
uninstall removes the webhook and the tools' ServiceAccounts but leaves the sandbox namespace when the chart
did not create it, and leaves Vault's login roles: anybody who may create ServiceAccounts and Pods there (the
built-in edit role) could recreate tool-<name>, project a token for the Vault audience and log in to Vault
as that tool, getting its credential for the tool's target namespaces without any approval.

To install again: ` + "`helm install`" + `, then ` + "`agent-sandbox vault configure`" + `, which writes the roles
and policies back and turns logins on again.

What stays: the auth method and the secrets engine with their configs (they hold Vault's own reviewer token,
nothing a sandbox can use), and what configure set up in the cluster (Vault's ServiceAccount, its
TokenReview and per-namespace rights); configure finds them in place. Objects not created by agent-sandbox
are left alone: ACL policies named agent-sandbox-* that it did not write ("left policy ... alone"), and
anything under other names. A mount at the policy's paths that agent-sandbox did not create stops disable
with an error, as it stops configure. Run disable with the policy configure used: it names the mounts.

Credentials already minted are not revoked: each lives out its lease (the scope's TTL, 10 minutes by
default) and Vault then deletes its ServiceAccount and RoleBinding. A sandbox running at that moment keeps
its credential until then, but its Vault token loses its ACL policy, so it can neither mint another nor
revoke its own (its cred-agent reports the failed revoke). Let running sandboxes finish first.

The Vault token is read from --vault-token-file, else from $VAULT_TOKEN; it needs rights to list and delete
roles and policies (an admin or root token). Vault Enterprise and HCP Vault: requests are made in the
namespace of $VAULT_NAMESPACE, else of the policy's spec.sandbox.credentialAgent.vaultNamespace, as with
configure. --dry-run prints the same lines prefixed "would" and changes nothing. A second run changes
nothing.`,
		Args: cli.Usage(cobra.NoArgs),
		RunE: cli.RunE(o),
	}
	f := cmd.Flags()
	o.bindFlags(f)
	f.BoolVar(&o.DryRun, "dry-run", false, "print what would change and change nothing")
	return cmd
}

// Complete fills defaults from the environment.
func (o *vaultDisableOptions) Complete() error {
	o.complete()
	return nil
}

// Validate checks the options without touching the network.
func (o *vaultDisableOptions) Validate() error { return o.validate() }

// Run loads the policy and deletes agent-sandbox's roles and policies from Vault.
func (o *vaultDisableOptions) Run(ctx context.Context) error {
	pol, vaultNS, token, err := o.load()
	if err != nil {
		return err
	}
	_, err = broker.Disable(ctx, broker.DisableConfig{
		Policy:                   pol,
		VaultAddr:                o.VaultAddr,
		VaultCAFile:              o.VaultCAFile,
		VaultEnterpriseNamespace: vaultNS,
		DryRun:                   o.DryRun,
		Out:                      o.streams.Out,
		Warnings:                 o.streams.ErrOut,
	}, token)
	if errors.Is(err, broker.ErrTokenRefused) {
		err = fmt.Errorf("%w; %s", err, tokenRefusedHint)
	}
	if err != nil {
		// Nothing we print may carry a token, whatever Vault put into its message.
		return errors.New(scrub.String(err.Error()))
	}
	return nil
}
