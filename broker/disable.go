package broker

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/agent-sandbox/agent-sandbox/internal/policy"
)

// DisableConfig says where Disable turns agent-sandbox's Vault side off.
type DisableConfig struct {
	// Policy names the auth method and secrets engine (spec.sandbox.credentialAgent) that Configure set up.
	Policy *policy.Compiled
	// VaultAddr is Vault's URL; VaultCAFile, when set, the CA that signs its certificate.
	VaultAddr   string
	VaultCAFile string
	// VaultEnterpriseNamespace, when set, is the Vault Enterprise / HCP Vault namespace to work in.
	VaultEnterpriseNamespace string
	// DryRun prints the plan and changes nothing.
	DryRun bool
	// Out receives one line per change and a summary.
	Out io.Writer
	// Warnings receives what the operator must read that does not stop Disable: no auth method of ours at
	// the policy's path, so no login role could be deleted there (default: discarded).
	Warnings io.Writer
}

// Why each kind of object goes, printed after its "deleted ..." line.
var disableWhy = map[vaultKind]string{
	kindAuthRole:    "Vault refuses this tool's logins",
	kindPolicy:      "tokens already issued with it can no longer mint credentials",
	kindSecretsRole: "no credential of this scope is minted",
}

// Disable makes Vault refuse every sandbox: it deletes, from the mounts the policy names, the login roles,
// the secrets engine's roles and the ACL policies that agent-sandbox manages (named agent-sandbox-*; a
// policy is deleted only if agent-sandbox wrote it), whether or not the policy still declares their tools.
// It is what must run before the Helm chart is uninstalled: without the webhook, anybody who may create
// ServiceAccounts and Pods in the sandbox namespace could get a Vault-audience token for a tool's
// ServiceAccount, and Vault would log them in as the tool.
//
// The mounts and their configs stay (they hold Vault's reviewer token and nothing a sandbox can use), so
// that Configure turns everything back on. Nothing in the cluster is read or changed. Credentials already
// minted live out their lease (at most the scope's TTL). Disable is idempotent: a second run changes
// nothing.
func Disable(ctx context.Context, cfg DisableConfig, vaultToken string) (*ConfigureResult, error) {
	if err := cfg.complete(); err != nil {
		return nil, err
	}
	vc, err := adminClient(ctx, cfg.VaultAddr, cfg.VaultCAFile, cfg.VaultEnterpriseNamespace, vaultToken)
	if err != nil {
		return nil, err
	}
	desired := disabledVault(cfg.Policy.Policy)
	state, err := readVaultState(ctx, vc, desired)
	if err != nil {
		return nil, err
	}
	steps, err := planDisable(desired, state)
	if err != nil {
		return nil, err
	}
	if authMount, _ := desiredMounts(desired); state.authMounts[authMount].Type != authMountType {
		fmt.Fprintf(cfg.Warnings, "warning: Vault has no Kubernetes auth method at auth/%s (the policy's spec.sandbox.credentialAgent.vaultAuthMount), so no login role was looked for there; if `vault configure` ran with another policy, run disable with that one\n", authMount)
	}
	for _, name := range state.foreignPolicies {
		fmt.Fprintf(cfg.Out, "left %s %s alone: not created by agent-sandbox\n", kindPolicy, name)
	}
	res := &ConfigureResult{}
	for _, s := range steps {
		if !cfg.DryRun {
			if err := applyVault(ctx, vc, s); err != nil {
				return res, fmt.Errorf("%s %s %s: %w", s.Action, s.Kind, s.Name, err)
			}
		}
		res.Changes = append(res.Changes, s.Change)
		fmt.Fprintln(cfg.Out, s.Line(cfg.DryRun))
	}
	switch {
	case cfg.DryRun:
		fmt.Fprintf(cfg.Out, "would delete %d items (dry run: nothing was changed)\n", len(steps))
	default:
		fmt.Fprintf(cfg.Out, "disabled: Vault holds no agent-sandbox login role, ACL policy or secrets role (%d deleted now)\n", len(steps))
	}
	return res, nil
}

func (cfg *DisableConfig) complete() error {
	return errors.Join(completeVaultRun(&cfg.Out, &cfg.Warnings, cfg.Policy, cfg.VaultAddr)...)
}

// disabledVault is what Vault holds of agent-sandbox when it is disabled: the policy's two mounts, with
// no tool. Configure's own plan against it prunes every managed role and policy under those mounts.
func disabledVault(p *policy.Policy) []vaultObject {
	none := *p
	none.Spec.Tools = nil
	var out []vaultObject
	for _, o := range desiredVault(&none, vaultDesired{}) {
		if o.kind == kindAuthMount || o.kind == kindSecretsMount {
			out = append(out, o)
		}
	}
	return out
}

// planDisable keeps, of Configure's plan against the disabled state, only the deletions: a mount that is
// missing is not created (it holds nothing to delete), and one that agent-sandbox did not create stops the
// plan as it stops Configure. Login roles are deleted first, so Vault refuses logins from the first change.
func planDisable(desired []vaultObject, st *vaultState) ([]vaultStep, error) {
	all, _, err := planVault(desired, st)
	if err != nil {
		return nil, err
	}
	var steps []vaultStep
	for _, s := range all {
		if s.Action != ActionDelete {
			continue
		}
		s.Why = disableWhy[vaultKind(s.Kind)]
		steps = append(steps, s)
	}
	return steps, nil
}
