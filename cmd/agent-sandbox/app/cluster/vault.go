package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"

	"github.com/agent-sandbox/agent-sandbox/broker"
	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/cli"
	"github.com/agent-sandbox/agent-sandbox/internal/podsecurity"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/scrub"
)

// defaultPolicyFile is the policy `vault configure` reads when --policy is not given.
const defaultPolicyFile = "policy/policy.yaml"

// tokenRefusedHint is added to a refused token's error: it says how to pass a better one.
const tokenRefusedHint = "pass an admin or root token with --vault-token-file or VAULT_TOKEN"

// allowUnenforcedFlag is the flag of `vault configure` and `preflight` that turns the refusal of a target
// namespace enforcing no Pod Security level into a warning.
const allowUnenforcedFlag = "allow-unenforced-namespaces"

// unenforcedHint is added to that refusal: it says what to do besides labelling.
const unenforcedHint = "Label them, or pass --" + allowUnenforcedFlag + " if something else (a cluster-wide AdmissionConfiguration default, another admission controller) keeps privileged and host-level Pods out of them."

// NewVaultCommand builds `agent-sandbox vault configure` and `agent-sandbox vault disable`.
func NewVaultCommand(streams cli.IO) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "vault",
		Short: "Configure Vault to mint per-action Kubernetes credentials for the policy's tools, or turn that off",
		Args:  cli.Usage(cobra.NoArgs),
	}
	cmd.AddCommand(newVaultConfigureCommand(streams), newVaultDisableCommand(streams))
	return cmd
}

// vaultAccess is what `vault configure` and `vault disable` share: the policy they read and how they reach
// Vault. The Vault token is deliberately not a flag: flags show up in `ps` and shell history.
type vaultAccess struct {
	PolicyFile     string
	VaultAddr      string
	VaultTokenFile string
	VaultCAFile    string

	streams cli.IO
	getenv  func(string) string
}

// bindFlags adds the shared flags.
func (o *vaultAccess) bindFlags(f *pflag.FlagSet) {
	f.StringVar(&o.PolicyFile, "policy", defaultPolicyFile, "policy file")
	f.StringVar(&o.VaultAddr, "vault-addr", "", "Vault's address (default $VAULT_ADDR)")
	f.StringVar(&o.VaultTokenFile, "vault-token-file", "", "file holding an admin Vault token (default: the token in $VAULT_TOKEN)")
	f.StringVar(&o.VaultCAFile, "vault-ca-file", "", "CA bundle for Vault's certificate (default $VAULT_CACERT)")
}

// complete fills the shared defaults from the environment.
func (o *vaultAccess) complete() {
	if o.getenv == nil {
		o.getenv = os.Getenv
	}
	if o.PolicyFile == "" {
		o.PolicyFile = defaultPolicyFile
	}
	if o.VaultAddr == "" {
		o.VaultAddr = o.getenv("VAULT_ADDR")
	}
	if o.VaultCAFile == "" {
		o.VaultCAFile = o.getenv("VAULT_CACERT")
	}
}

// validate checks the shared options without touching the network.
func (o *vaultAccess) validate() error {
	var errs []error
	if o.VaultAddr == "" {
		errs = append(errs, errors.New("Vault's address is required: --vault-addr or VAULT_ADDR"))
	}
	if o.VaultTokenFile == "" && o.getenv("VAULT_TOKEN") == "" {
		errs = append(errs, errors.New("a Vault token is required: --vault-token-file or VAULT_TOKEN"))
	}
	if ns := o.envVaultNamespace(); ns != "" && !policy.IsVaultNamespace(ns) {
		errs = append(errs, fmt.Errorf("VAULT_NAMESPACE=%q is not a Vault namespace path (names separated by single '/', such as admin/team-a)", ns))
	}
	return errors.Join(errs...)
}

// vaultConfigureOptions are the flags of `vault configure`.
type vaultConfigureOptions struct {
	vaultAccess
	Kubeconfig       string
	KubernetesHost   string
	KubernetesCAFile string
	VaultNamespace   string
	DryRun           bool
	// AllowUnenforced goes on when a target namespace enforces no Pod Security level, with a warning.
	AllowUnenforced bool
}

func newVaultConfigureCommand(streams cli.IO) *cobra.Command {
	o := &vaultConfigureOptions{vaultAccess: vaultAccess{streams: streams, getenv: os.Getenv}}
	cmd := &cobra.Command{
		Use:   "configure",
		Short: "Make Vault and the cluster match the policy (idempotent; prints one line per change)",
		Long: `configure sets up, from the policy:

  in the cluster: Vault's own ServiceAccount and long-lived token in --vault-namespace-name, a
  ClusterRole and binding that let it create TokenReviews (and nothing else cluster-wide), one ClusterRole
  per credential scope holding exactly the scope's rules (agent-sandbox-scope-<scope>), and in each
  namespace a tool targets a Role that lets Vault create and delete the per-action ServiceAccount and
  RoleBinding and bind the ClusterRoles of the scopes minted there, by name (it cannot create roles);

  in Vault: the Kubernetes auth method (one login role and one ACL policy per tool), which sends every
  sandbox's service-account token to the API server (TokenReview) and admits it only for the tool's
  ServiceAccount in the sandbox namespace, for the Vault audience, and only while the API server still
  accepts it: the token of a deleted sandbox Pod is refused. And the Kubernetes secrets engine with one
  role per credential scope. Roles and policies named agent-sandbox-* that the policy no longer declares
  are deleted. A mount that exists at the policy's mount paths but was not created by agent-sandbox is
  never adopted.

Upgrading from a release that logged sandboxes in with the JWT auth method: configure finds its own
auth mount of type jwt and replaces it ("replaced auth method ..."; --dry-run: "would replace"),
which revokes the Vault tokens that mount issued (calls running at that moment fail), then writes the
Kubernetes auth method's config and roles.

The Vault token is read from --vault-token-file, else from $VAULT_TOKEN; it needs rights to enable mounts
and write policies (an admin or root token). ACL policies named agent-sandbox-* that configure did not
write are never overwritten or deleted: configure stops with an error naming one it would have to
overwrite. Roles are compared field by field as allowlists: fields that would widen a role (a namespace
selector, a token period or explicit max TTL, CIDRs, a use count) are written empty, so one set by hand is
cleared ("updated auth role ..."), and any other field set on a role that configure does not write stops it
with an error naming the field. --dry-run prints the same lines prefixed "would" and changes nothing, neither in the cluster
nor in Vault.

Pod Security: the sandbox protects the node from the tool; Pod Security protects it from what the tool
deploys. Before changing anything, configure reads every namespace in every tool's namespaces list and
refuses (exit 1) when one enforces no Pod Security level: its pod-security.kubernetes.io/enforce label is
absent or privileged. The refusal names each such namespace and the command that fixes it, e.g.
  kubectl label ns demo-app pod-security.kubernetes.io/enforce=baseline
Only the label is checked: a cluster-wide default set in the API server's AdmissionConfiguration cannot be
read through the API. If such a default (or another admission controller) is what protects them, pass
--allow-unenforced-namespaces: the refusal becomes a warning on stderr. A target namespace that does not
exist yet is a warning here, then an error (configure needs it to give Vault its rights there). --dry-run
refuses the same way.

Vault Enterprise and HCP Vault: every Vault request is made in the namespace of $VAULT_NAMESPACE, else of
the policy's spec.sandbox.credentialAgent.vaultNamespace (they must agree when both are set). The
credential agents log in to the namespace the webhook's policy names, so name it there too (the Helm
chart: --set vault.namespace=...); configure says so on stderr when only $VAULT_NAMESPACE names it.`,
		Args: cli.Usage(cobra.NoArgs),
		RunE: cli.RunE(o),
	}
	f := cmd.Flags()
	o.bindFlags(f)
	f.StringVar(&o.Kubeconfig, "kubeconfig", "", "admin kubeconfig of the cluster (default $KUBECONFIG, then ~/.kube/config)")
	f.StringVar(&o.KubernetesHost, "kubernetes-host", "", "the API server's URL as Vault reaches it (default: the kubeconfig's server)")
	f.StringVar(&o.KubernetesCAFile, "kubernetes-ca-file", "", "the API server's CA bundle as Vault should trust it (default: the kubeconfig's CA)")
	f.StringVar(&o.VaultNamespace, "vault-namespace-name", broker.DefaultVaultNamespace, "namespace for Vault's own ServiceAccount and token")
	// The JWT auth method's flags: accepted, so that an upgrade's scripts keep working, and ignored.
	var ignored string
	f.StringVar(&ignored, "oidc-discovery-url", "", "ignored")
	f.StringVar(&ignored, "oidc-discovery-ca-file", "", "ignored")
	for _, name := range []string{"oidc-discovery-url", "oidc-discovery-ca-file"} {
		_ = f.MarkDeprecated(name, "it is ignored: Vault's Kubernetes auth method asks the API server about every token (TokenReview) and needs no signing keys")
	}
	f.BoolVar(&o.DryRun, "dry-run", false, "print what would change and change nothing")
	f.BoolVar(&o.AllowUnenforced, allowUnenforcedFlag, false, "go on, with a warning, when a target namespace enforces no Pod Security level (no pod-security.kubernetes.io/enforce label, or privileged)")
	return cmd
}

// Complete fills defaults from the environment.
func (o *vaultConfigureOptions) Complete() error {
	o.complete()
	if o.VaultNamespace == "" {
		o.VaultNamespace = broker.DefaultVaultNamespace
	}
	return nil
}

// Validate checks the options without touching the network.
func (o *vaultConfigureOptions) Validate() error { return o.validate() }

// envVaultNamespace is $VAULT_NAMESPACE without leading or trailing slashes (the Vault CLI accepts both).
func (o *vaultAccess) envVaultNamespace() string {
	return strings.Trim(strings.TrimSpace(o.getenv("VAULT_NAMESPACE")), "/")
}

// vaultNamespace is the Vault Enterprise / HCP Vault namespace to work in: $VAULT_NAMESPACE, else the
// policy's. Two different ones are an error: the agents would log in where configure wrote nothing.
func (o *vaultAccess) vaultNamespace(pol *policy.Compiled) (string, error) {
	env, fromPolicy := o.envVaultNamespace(), pol.Spec.Sandbox.CredentialAgent.VaultNamespace
	switch {
	case env != "" && fromPolicy != "" && env != fromPolicy:
		return "", fmt.Errorf("VAULT_NAMESPACE=%q but the policy's spec.sandbox.credentialAgent.vaultNamespace is %q: the credential agents log in to the policy's; make them the same", env, fromPolicy)
	case env != "" && fromPolicy == "":
		fmt.Fprintf(o.streams.ErrOut, "note: configuring Vault namespace %s (from VAULT_NAMESPACE); the credential agents log in to it only if the webhook's policy names it too (spec.sandbox.credentialAgent.vaultNamespace; the Helm chart: --set vault.namespace=%s)\n", env, env)
		return env, nil
	case env != "":
		return env, nil
	}
	return fromPolicy, nil
}

// load reads what both commands start from: the policy, the Vault namespace and the Vault token.
func (o *vaultAccess) load() (pol *policy.Compiled, vaultNS, token string, err error) {
	if pol, err = policy.LoadFile(o.PolicyFile); err != nil {
		return nil, "", "", err
	}
	if vaultNS, err = o.vaultNamespace(pol); err != nil {
		return nil, "", "", err
	}
	if token, err = o.vaultToken(); err != nil {
		return nil, "", "", err
	}
	return pol, vaultNS, token, nil
}

// Run loads the policy, connects to the cluster and configures Vault.
func (o *vaultConfigureOptions) Run(ctx context.Context) error {
	pol, vaultNS, token, err := o.load()
	if err != nil {
		return err
	}
	restCfg, err := cli.RESTConfig(o.Kubeconfig, "")
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	kube, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	host := o.KubernetesHost
	if host == "" {
		host = restCfg.Host
	}
	ca, err := o.kubernetesCA(restCfg.CAData, restCfg.CAFile)
	if err != nil {
		return err
	}
	_, err = broker.Configure(ctx, broker.ConfigureConfig{
		Policy:                    pol,
		Kube:                      kube,
		KubernetesHost:            host,
		KubernetesCA:              ca,
		VaultAddr:                 o.VaultAddr,
		VaultCAFile:               o.VaultCAFile,
		VaultNamespace:            o.VaultNamespace,
		DryRun:                    o.DryRun,
		VaultEnterpriseNamespace:  vaultNS,
		AllowUnenforcedNamespaces: o.AllowUnenforced,
		Out:                       o.streams.Out,
		Warnings:                  o.streams.ErrOut,
	}, token)
	if errors.Is(err, broker.ErrTokenRefused) {
		err = fmt.Errorf("%w; %s", err, tokenRefusedHint)
	}
	if errors.Is(err, podsecurity.ErrUnenforced) {
		err = fmt.Errorf("%w\n%s", err, unenforcedHint)
	}
	if err != nil {
		// Nothing we print may carry a token, whatever an API server or Vault put into its message.
		return errors.New(scrub.String(err.Error()))
	}
	return nil
}

// vaultToken reads the token from the file, else from the environment.
func (o *vaultAccess) vaultToken() (string, error) {
	token := o.getenv("VAULT_TOKEN")
	if o.VaultTokenFile != "" {
		b, err := os.ReadFile(o.VaultTokenFile)
		if err != nil {
			return "", fmt.Errorf("read Vault token: %w", err)
		}
		token = string(b)
	}
	token = strings.TrimSpace(token)
	if token == "" || strings.ContainsAny(token, " \t\r\n") {
		return "", errors.New("the Vault token is empty or not one word")
	}
	return token, nil
}

// kubernetesCA is --kubernetes-ca-file, else the kubeconfig's CA.
func (o *vaultConfigureOptions) kubernetesCA(data []byte, file string) ([]byte, error) {
	if o.KubernetesCAFile != "" {
		file, data = o.KubernetesCAFile, nil
	}
	if len(data) > 0 {
		return data, nil
	}
	if file == "" {
		return nil, errors.New("the kubeconfig has no CA for the API server; pass --kubernetes-ca-file")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read Kubernetes CA: %w", err)
	}
	return b, nil
}
