package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/cli"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/preflight"
)

// PreflightOptions are the flags of `agent-sandbox preflight`.
type PreflightOptions struct {
	Kubeconfig   string
	Policy       string
	RuntimeClass string
	Image        string
	PullPolicy   string
	VaultAddr    string
	VaultCIDR    string
	Timeout      time.Duration
	Keep         bool
	cli.OutputFlag
	// AllowUnenforced makes a target namespace that enforces no Pod Security level a warning, not a failure.
	AllowUnenforced bool

	nodeSelector map[string]string
	tolerations  []corev1.Toleration
	namespaces   []string
	streams      cli.IO
}

func NewPreflightCommand(streams cli.IO) *cobra.Command {
	o := &PreflightOptions{streams: streams}
	cmd := &cobra.Command{
		Use:   "preflight",
		Short: "Check by experiment that a cluster can run agent-sandbox safely, before installing it",
		Long: `preflight checks a cluster before agent-sandbox is installed, by running probe Pods rather than by
reading configuration (pod-security alone reads labels, of the namespaces the tools deploy into):

  pod-security          every namespace a tool of the policy targets enforces a Pod Security level
                        (label pod-security.kubernetes.io/enforce=baseline or restricted); needs --policy
  runtimeclass          the policy's gVisor RuntimeClass exists
  gvisor                a Pod under it reports gVisor's kernel, not the node's
  networkpolicy         a sandboxed Pod under a default-deny egress NetworkPolicy shaped like the chart's
                        cannot reach a Pod it reached without one (the enforcer really drops traffic)
  apiserver-egress      under that policy it still reaches the API server endpoints
  vault-egress          ... and Vault at --vault-addr
  dns-egress            ... and cluster DNS (skipped when there is no kube-system/kube-dns)
  webhook-reachability  the API server can call a webhook served by a Pod on port 9443

Everything it creates is in one temporary namespace (agent-sandbox-preflight-XXXXXX) and one
ValidatingWebhookConfiguration of the same name, scoped to that namespace with failurePolicy Ignore;
both are deleted at the end (--keep leaves them, for debugging). It needs the rights that installing
the chart needs. The probes run the agent-sandbox image (--image), which must be pullable by the nodes.

pod-security: the sandbox protects the node from the tool; Pod Security protects it from what the tool
deploys (an approved terraform apply into a namespace enforcing nothing could run a privileged or
hostPath Pod). A target namespace whose pod-security.kubernetes.io/enforce label is absent or privileged
fails the check, which names it and the fix, e.g.
  kubectl label ns demo-app pod-security.kubernetes.io/enforce=baseline
Only the label is checked: a cluster-wide default set in the API server's AdmissionConfiguration cannot
be read through the API. If such a default (or another admission controller) is what protects them,
--allow-unenforced-namespaces makes this a warning. A namespace that does not exist yet is a warning.

Each check prints PASS, FAIL, WARN or SKIP with what was seen and, on failure, what to do. The exit
status is 1 when any check fails; warnings do not change it.`,
		Example: `  # with the policy you will install (runtime class, node placement, image and Vault address from it)
  agent-sandbox preflight --policy policy/policy.yaml

  # a GKE cluster with Vault behind an internal load balancer
  agent-sandbox preflight --policy policy.yaml --image ghcr.io/agent-sandbox/agent-sandbox:v0.3.0 \
      --vault-addr https://vault.internal:8200 --vault-cidr 10.10.0.0/28`,
		Args: cli.Usage(cobra.NoArgs),
		RunE: cli.RunE(o),
	}
	f := cmd.Flags()
	f.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig of the cluster to check [$KUBECONFIG, else ~/.kube/config]")
	f.StringVar(&o.Policy, "policy", "", "the policy you will install: gives the runtime class, node selector, tolerations, image and Vault address")
	f.StringVar(&o.RuntimeClass, "runtime-class", "", "the gVisor RuntimeClass (default: the policy's, else gvisor)")
	f.StringVar(&o.Image, "image", "", "the agent-sandbox image the probes run (default: the policy's credential agent image)")
	f.StringVar(&o.PullPolicy, "image-pull-policy", string(corev1.PullIfNotPresent), "Always, IfNotPresent or Never")
	f.StringVar(&o.VaultAddr, "vault-addr", "", "Vault's address as sandbox Pods reach it (default: the policy's credentialAgent.vaultAddress)")
	f.StringVar(&o.VaultCIDR, "vault-cidr", "", "the NetworkPolicy CIDR that allows Vault (the chart's vault.egress; default: the address's IP)")
	f.DurationVar(&o.Timeout, "timeout", 2*time.Minute, "how long each probe Pod may take")
	f.BoolVar(&o.Keep, "keep", false, "leave the temporary namespace and webhook configuration in place")
	o.OutputFlag.Bind(cmd)
	f.BoolVar(&o.AllowUnenforced, allowUnenforcedFlag, false, "a target namespace that enforces no Pod Security level (no pod-security.kubernetes.io/enforce label, or privileged) is a warning, not a failure")
	cmd.AddCommand(newPreflightProbeCommand(streams))
	return cmd
}

// Complete fills what the flags leave open from the policy.
func (o *PreflightOptions) Complete() error {
	if o.Policy == "" {
		if o.RuntimeClass == "" {
			o.RuntimeClass = "gvisor"
		}
		return nil
	}
	p, err := policy.LoadFile(o.Policy)
	if err != nil {
		return fmt.Errorf("--policy: %w", err)
	}
	s := p.Spec.Sandbox
	if o.RuntimeClass == "" {
		o.RuntimeClass = s.RuntimeClassName
	}
	if o.Image == "" {
		o.Image = s.CredentialAgent.Image
	}
	if o.VaultAddr == "" {
		o.VaultAddr = s.CredentialAgent.VaultAddress
	}
	o.nodeSelector, o.tolerations = s.NodeSelector, s.Tolerations
	o.namespaces = p.TargetNamespaces()
	return nil
}

// Validate reports every missing or wrong flag at once.
func (o *PreflightOptions) Validate() error {
	var errs []error
	if o.Image == "" {
		errs = append(errs, errors.New("--image (or --policy) is required: the probes run the agent-sandbox image"))
	}
	if o.VaultAddr == "" {
		errs = append(errs, errors.New("--vault-addr (or --policy) is required: Vault's address as sandbox Pods reach it"))
	}
	switch corev1.PullPolicy(o.PullPolicy) {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		errs = append(errs, fmt.Errorf("--image-pull-policy %q: want Always, IfNotPresent or Never", o.PullPolicy))
	}
	if err := o.OutputFlag.Validate(); err != nil {
		errs = append(errs, err)
	}
	if o.Timeout <= 0 {
		errs = append(errs, errors.New("--timeout must be positive"))
	}
	return errors.Join(errs...)
}

// Run performs the checks and prints them.
func (o *PreflightOptions) Run(ctx context.Context) error {
	cfg, err := cli.RESTConfig(o.Kubeconfig, "")
	if err != nil {
		return fmt.Errorf("kubeconfig (--kubeconfig or $KUBECONFIG): %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	progress := func(s string) { fmt.Fprintf(o.streams.ErrOut, "  ... %s\n", s) }
	checks, err := preflight.Run(ctx, preflight.Options{Client: cs, RuntimeClass: o.RuntimeClass, Image: o.Image,
		PullPolicy: corev1.PullPolicy(o.PullPolicy), VaultAddr: o.VaultAddr, VaultCIDR: o.VaultCIDR,
		NodeSelector: o.nodeSelector, Tolerations: o.tolerations, Namespaces: o.namespaces, AllowUnenforcedNamespaces: o.AllowUnenforced,
		Timeout: o.Timeout, Keep: o.Keep, Progress: progress})
	failed, warned := 0, 0
	for _, c := range checks {
		switch c.Status {
		case preflight.Fail:
			failed++
		case preflight.Warn:
			warned++
		}
	}
	if o.OutputFlag.JSON() {
		_ = cli.WriteJSON(o.streams.Out, map[string]any{"checks": checks, "failed": failed, "warnings": warned})
	} else {
		for _, c := range checks {
			fmt.Fprintf(o.streams.Out, "%-4s %-20s %s\n", c.Status, c.Name, c.Detail)
			if c.Fix != "" {
				fmt.Fprintf(o.streams.Out, "     %-20s fix: %s\n", "", c.Fix)
			}
		}
	}
	if err != nil {
		return err
	}
	if failed > 0 {
		fmt.Fprintf(o.streams.ErrOut, "preflight: %d check(s) failed; agent-sandbox is not safe to install on this cluster yet\n", failed)
		return cli.ExitError{Code: 1}
	}
	if warned > 0 {
		fmt.Fprintf(o.streams.ErrOut, "preflight: no check failed, but %d warned: read the WARN lines above\n", warned)
		return nil
	}
	fmt.Fprintf(o.streams.ErrOut, "preflight: all %d checks passed\n", len(checks))
	return nil
}

// newPreflightProbeCommand is the in-cluster half of preflight, run inside the probe Pods.
func newPreflightProbeCommand(streams cli.IO) *cobra.Command {
	var timeout time.Duration
	var listen, cert, key string
	report := func(v any) error { return json.NewEncoder(streams.Out).Encode(v) }
	probe := &cobra.Command{Use: "probe", Short: "Inside a preflight probe Pod: report what the Pod sees", Hidden: true, Args: cli.Usage(cobra.NoArgs)}
	kernel := &cobra.Command{Use: "kernel", Short: "Report the kernel (gVisor or not)", Args: cli.Usage(cobra.NoArgs),
		RunE: func(*cobra.Command, []string) error { return report(preflight.Kernel()) }}
	connect := &cobra.Command{Use: "connect TARGET...", Short: "Try a TCP connection to each host:port (or resolve dns:NAME)", Args: cli.Usage(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return report(preflight.Connect(cmd.Context(), args, timeout))
		}}
	connect.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "per-target timeout")
	serve := &cobra.Command{Use: "serve", Short: "Answer every connection on --listen", Args: cli.Usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error { return preflight.Serve(cmd.Context(), listen) }}
	serve.Flags().StringVar(&listen, "listen", ":8080", "address to listen on")
	webhook := &cobra.Command{Use: "webhook", Short: "Serve an admission webhook that denies everything with a known message", Args: cli.Usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return preflight.ServeWebhook(cmd.Context(), listen, cert, key)
		}}
	webhook.Flags().StringVar(&listen, "listen", ":9443", "address to listen on")
	webhook.Flags().StringVar(&cert, "cert", "/tls/tls.crt", "TLS certificate (PEM)")
	webhook.Flags().StringVar(&key, "key", "/tls/tls.key", "TLS key (PEM)")
	probe.AddCommand(kernel, connect, serve, webhook)
	return probe
}
