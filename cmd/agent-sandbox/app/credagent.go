package app

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/agent-sandbox/agent-sandbox/broker"
	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/scrub"
)

// credAgentOptions are the flags of `cred-agent`. The admission webhook renders exactly these; nothing
// here comes from the environment, and no credential is ever a flag or an environment variable.
type credAgentOptions struct {
	VaultAddr    string
	VaultCAFile  string
	AuthMount    string
	AuthRole     string
	SecretsMount string
	SecretsRole  string
	Namespace    string
	TokenFile    string
	APIServer    string
	APICAFile    string
	Out          string
	ResultFile   string
	Scope        string
	LoginTimeout time.Duration

	streams IO
}

// newCredAgentCommand builds `agent-sandbox cred-agent` and `cred-agent ready`.
func newCredAgentCommand(streams IO) *cobra.Command {
	o := &credAgentOptions{streams: streams}
	cmd := &cobra.Command{
		Use:   "cred-agent",
		Short: "Fetch one per-action Kubernetes credential from Vault, keep it as a kubeconfig, revoke it on exit",
		Long: `cred-agent is the native sidecar the admission webhook injects into every sandbox Pod. It logs in to
Vault with the Pod's projected service-account token (--token-file), asks the Kubernetes secrets engine
for a credential in --namespace, writes it as a kubeconfig (--out, mode 0400, replaced atomically) and
prints a credential.issued event as one JSON line on stdout. Then it waits. On SIGTERM (the tool
container has exited) it revokes its Vault token, which makes Vault delete the generated ServiceAccount,
Role and RoleBinding, removes the kubeconfig, prints credential.revoked, then reports the tool's result
file (--result-file) as a tool.result event — the tool's one JSON result object, scrubbed of the
credential's exact values and of anything shaped like a secret — and exits 0.

Any failure before the kubeconfig is written prints one line on stderr and exits 1; the sidecar's postStart
hook ("cred-agent ready") then never succeeds and the tool container never starts.`,
		Args: usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Complete()
			if err := o.Validate(); err != nil {
				return o.fail(nil, err)
			}
			return o.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.VaultAddr, "vault-addr", "", "Vault's address")
	f.StringVar(&o.VaultCAFile, "vault-ca-file", "", "CA bundle for Vault's certificate (default: the system roots)")
	f.StringVar(&o.AuthMount, "auth-mount", policy.DefaultVaultAuthMount, "mount path of Vault's JWT auth method")
	f.StringVar(&o.AuthRole, "auth-role", "", "Vault login role (the tool's)")
	f.StringVar(&o.SecretsMount, "secrets-mount", policy.DefaultVaultSecretsMount, "mount path of Vault's Kubernetes secrets engine")
	f.StringVar(&o.SecretsRole, "secrets-role", "", "secrets engine role (the tool's scope)")
	f.StringVar(&o.Namespace, "namespace", "", "namespace the credential is for")
	f.StringVar(&o.TokenFile, "token-file", contract.VaultTokenPath, "projected service-account token to log in with")
	f.StringVar(&o.APIServer, "api-server", "", "API server URL written into the kubeconfig")
	f.StringVar(&o.APICAFile, "api-ca-file", contract.APIServerCADir+"/ca.crt", "API server CA written into the kubeconfig")
	f.StringVar(&o.Out, "out", contract.KubeconfigPath, "where to write the kubeconfig")
	f.StringVar(&o.Scope, "scope", "", "credential scope name (for events only)")
	f.StringVar(&o.ResultFile, "result-file", "", "the tool's result file, reported (scrubbed) as a tool.result event once the credential is revoked")
	f.DurationVar(&o.LoginTimeout, "login-timeout", broker.DefaultLoginTimeout, "give up logging in and minting after this long (transient errors are retried)")
	cmd.AddCommand(newCredAgentReadyCommand(streams))
	return cmd
}

// Complete has nothing to fill: every default is a flag default.
func (o *credAgentOptions) Complete() {}

// Validate checks that every required flag is set.
func (o *credAgentOptions) Validate() error {
	cfg := o.config()
	return cfg.Validate()
}

func (o *credAgentOptions) config() broker.AgentConfig {
	return broker.AgentConfig{
		VaultAddr: o.VaultAddr, VaultCAFile: o.VaultCAFile,
		AuthMount: o.AuthMount, AuthRole: o.AuthRole,
		SecretsMount: o.SecretsMount, SecretsRole: o.SecretsRole,
		Namespace: o.Namespace, Scope: o.Scope,
		TokenFile: o.TokenFile, APIServer: o.APIServer, APICAFile: o.APICAFile, Out: o.Out, ResultFile: o.ResultFile,
		LoginTimeout: o.LoginTimeout,
		Events:       o.streams.Out,
	}
}

// Run issues the credential, waits for the stop signal (ctx is cancelled on SIGTERM and SIGINT) and
// revokes it.
func (o *credAgentOptions) Run(ctx context.Context) error {
	agent, err := broker.NewAgent(o.config())
	if err != nil {
		return o.fail(nil, err)
	}
	if err := agent.Run(ctx); err != nil {
		// Vault's errors may echo a token: scrub by the values the agent was issued, too.
		return o.fail(agent.Scrubber(), err)
	}
	return nil
}

// fail prints err as one line scrubbed by sc (nil: by pattern) on stderr and makes the process exit 1.
func (o *credAgentOptions) fail(sc *scrub.Scrubber, err error) error {
	fmt.Fprintf(o.streams.ErrOut, "cred-agent: %s\n", oneLineError(sc, err))
	return exitError{code: 1}
}

// oneLineError flattens an error (errors.Join puts one per line) and scrubs any secret out of it.
func oneLineError(sc *scrub.Scrubber, err error) string {
	parts := strings.FieldsFunc(err.Error(), func(r rune) bool { return r == '\n' || r == '\r' })
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return sc.String(strings.Join(parts, "; "))
}

// credAgentReadyOptions are the flags of `cred-agent ready`.
type credAgentReadyOptions struct {
	File string
	Wait time.Duration

	streams IO
}

func newCredAgentReadyCommand(streams IO) *cobra.Command {
	o := &credAgentReadyOptions{streams: streams}
	cmd := &cobra.Command{
		Use:   "ready",
		Short: "Exit 0 once the kubeconfig has been written (the sidecar's postStart hook)",
		Long: `Exit 0 if the credential agent's kubeconfig exists and is not empty. With --wait, keep checking
until it does or the time is up. The webhook injects this as the sidecar's postStart hook: the kubelet
starts the tool container only after the hook returns, so the tool never starts without its credential.`,
		Args: usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Complete()
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&o.File, "file", contract.KubeconfigPath, "the kubeconfig the agent writes")
	cmd.Flags().DurationVar(&o.Wait, "wait", 0, "keep checking this long (0: check once)")
	return cmd
}

// Complete fills the default path.
func (o *credAgentReadyOptions) Complete() {
	if o.File == "" {
		o.File = contract.KubeconfigPath
	}
}

// Validate checks the wait.
func (o *credAgentReadyOptions) Validate() error {
	if o.Wait < 0 {
		return fmt.Errorf("--wait must not be negative")
	}
	return nil
}

// Run checks the file, every 50 ms until --wait has passed.
func (o *credAgentReadyOptions) Run(ctx context.Context) error {
	deadline := time.Now().Add(o.Wait)
	for {
		err := broker.KubeconfigReady(o.File)
		if err == nil {
			return nil
		}
		if !time.Now().Before(deadline) || ctx.Err() != nil {
			fmt.Fprintf(o.streams.ErrOut, "cred-agent ready: %s\n", oneLineError(nil, err))
			return exitError{code: 1}
		}
		time.Sleep(50 * time.Millisecond)
	}
}
