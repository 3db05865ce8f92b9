package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	vaultapi "github.com/hashicorp/vault/api"
	"k8s.io/client-go/kubernetes"

	"github.com/agent-sandbox/agent-sandbox/internal/podsecurity"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
)

// DefaultReviewerTokenWait bounds the wait for the token controller to fill Vault's token Secret.
const DefaultReviewerTokenWait = 30 * time.Second

// ConfigureConfig says what Configure sets up, and where.
type ConfigureConfig struct {
	// Policy is the compiled policy to configure Vault from.
	Policy *policy.Compiled
	// Kube is a client with cluster-admin rights (it creates RBAC for Vault).
	Kube kubernetes.Interface
	// KubernetesHost and KubernetesCA are the API server's URL and CA bundle as Vault sees them.
	KubernetesHost string
	KubernetesCA   []byte
	// VaultAddr is Vault's URL; VaultCAFile, when set, the CA that signs its certificate.
	VaultAddr   string
	VaultCAFile string
	// VaultNamespace is the Kubernetes namespace that holds Vault's ServiceAccount and its token (default
	// DefaultVaultNamespace).
	VaultNamespace string
	// VaultEnterpriseNamespace, when set, is the Vault Enterprise / HCP Vault namespace every Vault request
	// is made in (X-Vault-Namespace); empty is the root namespace. The credential agent must log in to the
	// same one (spec.sandbox.credentialAgent.vaultNamespace).
	VaultEnterpriseNamespace string
	// DryRun prints the plan and changes nothing.
	DryRun bool
	// Out receives one line per change and a summary.
	Out io.Writer
	// ReviewerTokenWait bounds the wait for Vault's token Secret to be filled (default
	// DefaultReviewerTokenWait).
	ReviewerTokenWait time.Duration
	// AllowUnenforcedNamespaces lets Configure go on when a namespace the policy's tools target enforces
	// no Pod Security level; the refusal (podsecurity.ErrUnenforced) is then printed to Warnings instead.
	AllowUnenforcedNamespaces bool
	// Warnings receives what the operator must read that does not stop Configure: target namespaces that
	// do not exist yet, and unenforced ones with AllowUnenforcedNamespaces (default: discarded).
	Warnings io.Writer
}

// ConfigureResult lists what Configure changed (or, in a dry run, would change).
type ConfigureResult struct {
	Changes []Change
	// Unchanged counts the objects that were already as the policy wants them.
	Unchanged int
}

// Configure makes the cluster and Vault match the policy. It first checks that Vault answers and accepts
// vaultToken, so that a wrong token changes nothing, and that every target namespace enforces a Pod
// Security level (podsecurity.ErrUnenforced otherwise, unless AllowUnenforcedNamespaces). Then it gives
// Vault its identity and rights in the cluster, writes Vault's mounts, configs, policies and roles and
// prunes the managed ones the policy no longer declares. It is idempotent: a second run reports no change. Each change is printed as it is
// made; an error stops at the first failed change.
func Configure(ctx context.Context, cfg ConfigureConfig, vaultToken string) (*ConfigureResult, error) {
	if err := cfg.complete(); err != nil {
		return nil, err
	}
	vc, err := adminClient(ctx, cfg.VaultAddr, cfg.VaultCAFile, cfg.VaultEnterpriseNamespace, vaultToken)
	if err != nil {
		return nil, err
	}

	// Vault mints credentials that let a tool deploy into its target namespaces; what it deploys there is
	// kept off the node by Pod Security, not by the sandbox. Refuse before changing anything.
	ps, err := podsecurity.Check(ctx, cfg.Kube.CoreV1().Namespaces(), cfg.Policy.TargetNamespaces())
	if err != nil {
		return nil, err
	}
	for _, w := range ps.Warnings() {
		fmt.Fprintln(cfg.Warnings, "warning: "+w)
	}
	if err := ps.Err(); err != nil {
		if !cfg.AllowUnenforcedNamespaces {
			return nil, err
		}
		fmt.Fprintf(cfg.Warnings, "WARNING: going on as told, but %v\n", err)
	}

	res := &ConfigureResult{}
	report := func(c Change) {
		res.Changes = append(res.Changes, c)
		fmt.Fprintln(cfg.Out, c.Line(cfg.DryRun))
	}
	p := cfg.Policy.Policy

	csteps, unchanged, err := planCluster(ctx, cfg.Kube, p, cfg.VaultNamespace)
	if err != nil {
		return nil, err
	}
	res.Unchanged += unchanged
	for _, s := range csteps {
		if !cfg.DryRun {
			if err := s.apply(ctx); err != nil {
				return res, fmt.Errorf("%s %s %s: %w", s.Action, s.Kind, s.Name, err)
			}
		}
		report(s.Change)
	}

	wait := cfg.ReviewerTokenWait
	if cfg.DryRun {
		wait = 0
	}
	jwt, err := reviewerJWT(ctx, cfg.Kube, cfg.VaultNamespace, wait)
	if err != nil && !(cfg.DryRun && errors.Is(err, ErrReviewerTokenMissing)) {
		return res, err
	}
	desired := desiredVault(p, vaultDesired{KubernetesHost: cfg.KubernetesHost, KubernetesCA: string(cfg.KubernetesCA), ReviewerJWT: jwt})
	state, err := readVaultState(ctx, vc, desired)
	if err != nil {
		return res, err
	}
	vsteps, unchanged, err := planVault(desired, state)
	if err != nil {
		return res, err
	}
	for _, name := range state.foreignPolicies {
		if !slices.ContainsFunc(desired, func(o vaultObject) bool { return o.kind == kindPolicy && o.name == name }) {
			fmt.Fprintf(cfg.Out, "left %s %s alone: not created by agent-sandbox\n", kindPolicy, name)
		}
	}
	res.Unchanged += unchanged
	for _, s := range vsteps {
		if !cfg.DryRun {
			if err := applyVault(ctx, vc, s); err != nil {
				return res, fmt.Errorf("%s %s %s: %w", s.Action, s.Kind, s.Name, err)
			}
		}
		report(s.Change)
	}
	if cfg.DryRun {
		fmt.Fprintf(cfg.Out, "unchanged: %d items (dry run: nothing was changed)\n", res.Unchanged)
	} else {
		fmt.Fprintf(cfg.Out, "unchanged: %d items\n", res.Unchanged)
	}
	return res, nil
}

// adminClient is a Vault client holding vaultToken, after Vault has answered that it accepts the token: a
// wrong token fails here (ErrTokenRefused), before anything is read or changed.
func adminClient(ctx context.Context, addr, caFile, namespace, vaultToken string) (*vaultapi.Client, error) {
	vc, err := newVaultClient(addr, caFile, namespace)
	if err != nil {
		return nil, err
	}
	vc.SetToken(vaultToken)
	if _, err := vaultCall(ctx, vc, vc.Auth().Token().LookupSelfWithContext); err != nil {
		if errors.Is(err, ErrPermissionDenied) {
			// Vault says "permission denied" and "invalid token"; the first is the whole story.
			return nil, fmt.Errorf("%w (permission denied)", ErrTokenRefused)
		}
		return nil, err
	}
	return vc, nil
}

func (cfg *ConfigureConfig) complete() error {
	if cfg.VaultNamespace == "" {
		cfg.VaultNamespace = DefaultVaultNamespace
	}
	if cfg.ReviewerTokenWait <= 0 {
		cfg.ReviewerTokenWait = DefaultReviewerTokenWait
	}
	errs := completeVaultRun(&cfg.Out, &cfg.Warnings, cfg.Policy, cfg.VaultAddr)
	if cfg.Kube == nil {
		errs = append(errs, errors.New("no Kubernetes client"))
	}
	if cfg.KubernetesHost == "" {
		errs = append(errs, errors.New("no Kubernetes API server URL for Vault"))
	}
	if len(cfg.KubernetesCA) == 0 {
		errs = append(errs, errors.New("no Kubernetes API server CA for Vault"))
	}
	return errors.Join(errs...)
}

// completeVaultRun fills what Configure and Disable default alike (their output writers) and reports what
// both need: a policy and Vault's address.
func completeVaultRun(out, warnings *io.Writer, p *policy.Compiled, vaultAddr string) []error {
	if *out == nil {
		*out = io.Discard
	}
	if *warnings == nil {
		*warnings = io.Discard
	}
	var errs []error
	if p == nil {
		errs = append(errs, errors.New("no policy"))
	}
	if vaultAddr == "" {
		errs = append(errs, errors.New("no Vault address"))
	}
	return errs
}

// readVaultState reads what Vault holds of the desired objects, and the managed objects it may prune.
func readVaultState(ctx context.Context, vc *vaultapi.Client, desired []vaultObject) (*vaultState, error) {
	st := &vaultState{
		authMounts:    map[string]mountInfo{},
		secretsMounts: map[string]mountInfo{},
		objects:       map[string]map[string]any{},
		managed:       map[vaultKind]map[string]string{},
	}
	if err := st.readMounts(ctx, vc); err != nil {
		return nil, err
	}
	authMount, secretsMount := desiredMounts(desired)
	authOK := st.authMounts[authMount].Type == authMountType
	secretsOK := st.secretsMounts[secretsMount].Type == secretsMountType
	if err := st.readObjects(ctx, vc, desired, authOK, secretsOK); err != nil {
		return nil, err
	}
	if authOK {
		if err := st.listManaged(ctx, vc, kindAuthRole, "auth/"+authMount+"/role"); err != nil {
			return nil, err
		}
	}
	if secretsOK {
		if err := st.listManaged(ctx, vc, kindSecretsRole, secretsMount+"/roles"); err != nil {
			return nil, err
		}
	}
	if err := st.readManagedPolicies(ctx, vc); err != nil {
		return nil, err
	}
	return st, nil
}

// readMounts records the auth methods and secrets engines Vault has mounted, by path.
func (st *vaultState) readMounts(ctx context.Context, vc *vaultapi.Client) error {
	auths, err := vaultCall(ctx, vc, vc.Sys().ListAuthWithContext)
	if err != nil {
		return fmt.Errorf("list auth methods: %w", err)
	}
	for k, m := range auths {
		st.authMounts[mountPath(k)] = mountInfo{Type: m.Type, Description: m.Description}
	}
	mounts, err := vaultCall(ctx, vc, vc.Sys().ListMountsWithContext)
	if err != nil {
		return fmt.Errorf("list secrets engines: %w", err)
	}
	for k, m := range mounts {
		st.secretsMounts[mountPath(k)] = mountInfo{Type: m.Type, Description: m.Description}
	}
	return nil
}

// desiredMounts returns the paths of the desired auth method and secrets engine.
func desiredMounts(desired []vaultObject) (authMount, secretsMount string) {
	for _, o := range desired {
		switch o.kind {
		case kindAuthMount:
			authMount = o.path
		case kindSecretsMount:
			secretsMount = o.path
		}
	}
	return authMount, secretsMount
}

// readObjects records what Vault holds of the desired policies, configurations and roles. Objects under a
// mount that is missing or of another type are not read: Vault has none of them to compare.
func (st *vaultState) readObjects(ctx context.Context, vc *vaultapi.Client, desired []vaultObject, authOK, secretsOK bool) error {
	for _, o := range desired {
		var data map[string]any
		switch {
		case o.kind == kindPolicy:
			text, err := vaultCall(ctx, vc, func(ctx context.Context) (string, error) {
				return vc.Sys().GetPolicyWithContext(ctx, o.name)
			})
			if err != nil {
				return fmt.Errorf("read policy %s: %w", o.name, err)
			}
			if text != "" {
				data = map[string]any{"policy": text}
			}
		case o.kind == kindConfig || o.kind == kindAuthRole || o.kind == kindSecretsRole:
			if strings.HasPrefix(o.path, "auth/") && !authOK || !strings.HasPrefix(o.path, "auth/") && !secretsOK {
				continue
			}
			s, err := vaultCall(ctx, vc, func(ctx context.Context) (*vaultapi.Secret, error) {
				return vc.Logical().ReadWithContext(ctx, o.path)
			})
			if err != nil {
				return fmt.Errorf("read %s %s: %w", o.kind, o.name, err)
			}
			if s != nil && s.Data != nil {
				data = s.Data
			}
		default:
			continue
		}
		if data != nil {
			st.objects[objectKey(o.kind, o.name)] = data
		}
	}
	return nil
}

// listManaged records the roles of one kind under path whose names carry our prefix, so that those no
// longer desired can be pruned.
func (st *vaultState) listManaged(ctx context.Context, vc *vaultapi.Client, kind vaultKind, path string) error {
	s, err := vaultCall(ctx, vc, func(ctx context.Context) (*vaultapi.Secret, error) {
		return vc.Logical().ListWithContext(ctx, path)
	})
	if err != nil {
		return fmt.Errorf("list %ss: %w", kind, err)
	}
	st.managed[kind] = map[string]string{}
	if s == nil {
		return nil
	}
	keys, _ := s.Data["keys"].([]any)
	for _, k := range keys {
		if name, ok := k.(string); ok && strings.HasPrefix(name, policy.VaultPrefix) {
			st.managed[kind][name] = path + "/" + name
		}
	}
	return nil
}

// readManagedPolicies records the ACL policies with our prefix: those we wrote may be pruned, while those
// with our prefix that we did not write are kept aside as foreign.
func (st *vaultState) readManagedPolicies(ctx context.Context, vc *vaultapi.Client) error {
	names, err := vaultCall(ctx, vc, vc.Sys().ListPoliciesWithContext)
	if err != nil {
		return fmt.Errorf("list policies: %w", err)
	}
	st.managed[kindPolicy] = map[string]string{}
	for _, name := range names {
		if !strings.HasPrefix(name, policy.VaultPrefix) {
			continue
		}
		text, err := vaultCall(ctx, vc, func(ctx context.Context) (string, error) {
			return vc.Sys().GetPolicyWithContext(ctx, name)
		})
		if err != nil {
			return fmt.Errorf("read policy %s: %w", name, err)
		}
		if managedPolicy(text) {
			st.managed[kindPolicy][name] = "sys/policies/acl/" + name
		} else {
			st.foreignPolicies = append(st.foreignPolicies, name)
		}
	}
	return nil
}

// applyVault makes one change in Vault.
func applyVault(ctx context.Context, vc *vaultapi.Client, s vaultStep) error {
	write := func(path string, data map[string]any) error {
		_, err := vaultCall(ctx, vc, func(ctx context.Context) (*vaultapi.Secret, error) {
			return vc.Logical().WriteWithContext(ctx, path, data)
		})
		return err
	}
	if s.Action == ActionDelete {
		_, err := vaultCall(ctx, vc, func(ctx context.Context) (*vaultapi.Secret, error) {
			return vc.Logical().DeleteWithContext(ctx, s.deletePath)
		})
		return err
	}
	o := s.obj
	if s.Action == ActionReplace {
		// Disabling a mount deletes what it holds and revokes the tokens and leases it issued; the
		// steps after this one write its config and roles again.
		var err error
		switch o.kind {
		case kindAuthMount:
			err = vc.Sys().DisableAuthWithContext(ctx, o.path)
		case kindSecretsMount:
			err = vc.Sys().UnmountWithContext(ctx, o.path)
		}
		if err := vaultErr(ctx, vc.Address(), err); err != nil {
			return err
		}
	}
	switch o.kind {
	case kindAuthMount:
		return vaultErr(ctx, vc.Address(), vc.Sys().EnableAuthWithOptionsWithContext(ctx, o.path, &vaultapi.EnableAuthOptions{
			Type: authMountType, Description: o.data["description"].(string),
		}))
	case kindSecretsMount:
		return vaultErr(ctx, vc.Address(), vc.Sys().MountWithContext(ctx, o.path, &vaultapi.MountInput{
			Type: secretsMountType, Description: o.data["description"].(string),
		}))
	case kindConfig:
		if err := write(o.path, o.data); err != nil {
			return err
		}
		if o.fingerprint == "" {
			return nil
		}
		// Record which token the config now holds (see describeMount); written after the config, so a
		// failure in between makes the next run write the config again.
		tune, base := "sys/mounts/"+o.mount+"/tune", secretsMountDescription
		if p, ok := strings.CutPrefix(o.mount, "auth/"); ok {
			tune, base = "sys/auth/"+p+"/tune", authMountDescription
		}
		return write(tune, map[string]any{"description": describeMount(base, o.fingerprint)})
	default:
		return write(o.path, o.data)
	}
}
