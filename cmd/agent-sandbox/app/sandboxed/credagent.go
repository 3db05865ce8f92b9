package sandboxed

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/agent-sandbox/agent-sandbox/broker"
	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/cli"
	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/scrub"
)

// credAgentOptions are the flags of `cred-agent`. The admission webhook renders exactly these; nothing
// here comes from the environment, and no credential is ever a flag or an environment variable.
type credAgentOptions struct {
	// Agent takes the flags the broker's agent runs with, as they are (config adds where events go).
	Agent     broker.AgentConfig
	ClaimFile string
	ClaimKeys string
	ClaimSpec string

	streams cli.IO
}

// NewCredAgentCommand builds `agent-sandbox cred-agent` and `cred-agent ready`.
func NewCredAgentCommand(streams cli.IO) *cobra.Command {
	o := &credAgentOptions{streams: streams}
	cmd := &cobra.Command{
		Use:   "cred-agent",
		Short: "Fetch one per-action Kubernetes credential from Vault, keep it as a kubeconfig, revoke it on exit",
		Long: `cred-agent is the native sidecar the admission webhook injects into every sandbox Pod. It logs in to
Vault with the Pod's projected service-account token (--token-file), asks the Kubernetes secrets engine
for a credential in --namespace, writes it as a kubeconfig (--out, mode 0400, replaced atomically) and
prints a credential.issued event as one JSON line on stdout. Then it waits. On SIGTERM (the tool
container has exited) it revokes its Vault token, which makes Vault delete the generated ServiceAccount
and RoleBinding, removes the kubeconfig, prints credential.revoked, then reports the tool's result
file (--result-file) as a tool.result event — the tool's one JSON result object, scrubbed of the
credential's exact values and of anything shaped like a secret — and exits 0. If Vault fails or refuses
the revocation (the token had not expired), the credential stays valid until its lease ends: it prints
credential.revoke_failed, reports a tool.result error instead of the result, which stays in the Pod, and
exits 1.

Any failure before the kubeconfig is written prints one line on stderr and exits 1. A tool that is not one
of this binary's runners is held back by the sidecar's postStart hook ("cred-agent ready"), which then never
returns success, so its container never starts; this binary's runners (run pod-status, terraform-plan, ...)
start beside the agent and wait for the kubeconfig themselves, and without one they use nothing and fail.

In a warm Pod (--claim-file instead of --namespace) the agent does nothing until the Pod's claim — which the
admission webhook validated — appears in the claim file. It verifies the webhook's signature of the claim for
this Pod (--claim-keys) and that the claim's argv and namespace are the tool's rendering of its parameters
(--claim-spec); a claim that fails either is refused (credential.failed) and nothing is minted. It then
takes the target namespace from the claim,
issues the credential, and revokes it and reports the result as soon as the warm entry point writes
--done-file. It serves one claim: restarted after a claim, it issues nothing. A failure is reported as a
credential.failed event, and the agent stays up until it is stopped.`,
		Args: cli.Usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Complete()
			if err := o.Validate(); err != nil {
				return o.fail(nil, err)
			}
			return o.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Agent.VaultAddr, "vault-addr", "", "Vault's address")
	f.StringVar(&o.Agent.VaultCAFile, "vault-ca-file", "", "CA bundle for Vault's certificate (default: the system roots)")
	f.StringVar(&o.Agent.VaultNamespace, "vault-namespace", "", "Vault Enterprise / HCP Vault namespace of both mounts (default: the root namespace)")
	f.StringVar(&o.Agent.AuthMount, "auth-mount", policy.DefaultVaultAuthMount, "mount path of Vault's Kubernetes auth method")
	f.StringVar(&o.Agent.AuthRole, "auth-role", "", "Vault login role (the tool's)")
	f.StringVar(&o.Agent.SecretsMount, "secrets-mount", policy.DefaultVaultSecretsMount, "mount path of Vault's Kubernetes secrets engine")
	f.StringVar(&o.Agent.SecretsRole, "secrets-role", "", "secrets engine role (the tool's scope)")
	f.StringVar(&o.Agent.Namespace, "namespace", "", "namespace the credential is for")
	f.StringVar(&o.Agent.TokenFile, "token-file", contract.VaultTokenPath, "projected service-account token to log in with")
	f.StringVar(&o.Agent.APIServer, "api-server", "", "API server URL written into the kubeconfig")
	f.StringVar(&o.Agent.APICAFile, "api-ca-file", contract.APIServerCADir+"/ca.crt", "API server CA written into the kubeconfig")
	f.StringVar(&o.Agent.Out, "out", contract.KubeconfigPath, "where to write the kubeconfig")
	f.StringVar(&o.Agent.Scope, "scope", "", "credential scope name (for events only)")
	f.StringVar(&o.Agent.ResultFile, "result-file", "", "the tool's result file, reported (scrubbed) as a tool.result event once the credential is revoked")
	f.StringVar(&o.ClaimFile, "claim-file", "", "a warm Pod's claim file: wait for the claim and take the target namespace from it (instead of --namespace)")
	f.StringVar(&o.ClaimKeys, "claim-keys", "", "with --claim-file: the admission webhook's claim-signing public keys (comma-separated base64url Ed25519); a claim without a valid signature for this Pod is refused")
	f.StringVar(&o.ClaimSpec, "claim-spec", "", "with --claim-file: the tool's argv template and parameters (JSON, rendered by the webhook); a claim whose argv or namespace is not their rendering is refused")
	f.StringVar(&o.Agent.DoneFile, "done-file", "", "a warm Pod's done marker: revoke and report as soon as it exists")
	f.DurationVar(&o.Agent.LoginTimeout, "login-timeout", broker.DefaultLoginTimeout, "give up logging in and minting after this long (transient errors are retried)")
	cmd.AddCommand(newCredAgentReadyCommand(streams))
	return cmd
}

// Complete has nothing to fill: every default is a flag default.
func (o *credAgentOptions) Complete() {}

// Validate checks that every required flag is set.
func (o *credAgentOptions) Validate() error {
	if o.ClaimFile != "" {
		if o.Agent.Namespace != "" {
			return fmt.Errorf("give --namespace or --claim-file, not both")
		}
		if _, err := newClaimVerifier(o.ClaimKeys, o.ClaimSpec); err != nil {
			return err
		}
		cfg := o.config()
		cfg.Namespace = "from-the-claim"
		return cfg.Validate()
	}
	cfg := o.config()
	return cfg.Validate()
}

func (o *credAgentOptions) config() broker.AgentConfig {
	cfg := o.Agent
	cfg.Events = o.streams.Out
	return cfg
}

// Run issues the credential, waits for the stop signal (ctx is cancelled on SIGTERM and SIGINT) and
// revokes it.
func (o *credAgentOptions) Run(ctx context.Context) error {
	if o.ClaimFile != "" {
		return o.runWarm(ctx)
	}
	// A native sidecar that is killed (OOM, a crash) is restarted with the same volumes. The token of the
	// credential it issued died with it, so nobody could revoke that credential; a second one would be
	// a second live credential for one call. The first start leaves a marker, removed only when it ends
	// holding nothing valid (a failed login); a restart that finds it issues nothing.
	marker := filepath.Join(filepath.Dir(o.Agent.Out), issuedMarker)
	f, err := os.OpenFile(marker, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return o.fail(nil, fmt.Errorf("this Pod's credential agent started before (it was restarted): it issues no second credential; the first one's lease ends with its TTL (%v)", err))
	}
	f.Close()
	agent, err := broker.NewAgent(o.config())
	if err != nil {
		return o.fail(nil, err)
	}
	if err := agent.Run(ctx); err != nil {
		if !agent.MayHoldCredential() {
			// Nothing of this start is valid (no login, or its token revoked): a restart may try again.
			_ = os.Remove(marker)
		}
		// Vault's errors may echo a token: scrub by the values the agent was issued, too.
		return o.fail(agent.Scrubber(), err)
	}
	return nil
}

// fail prints err as one line scrubbed by sc (nil: by pattern) on stderr and makes the process exit 1.
func (o *credAgentOptions) fail(sc *scrub.Scrubber, err error) error {
	fmt.Fprintf(o.streams.ErrOut, "cred-agent: %s\n", oneLineError(sc, err))
	return cli.ExitError{Code: 1}
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

	streams cli.IO
}

func newCredAgentReadyCommand(streams cli.IO) *cobra.Command {
	o := &credAgentReadyOptions{streams: streams}
	cmd := &cobra.Command{
		Use:   "ready",
		Short: "Exit 0 once the kubeconfig has been written (the sidecar's postStart hook)",
		Long: `Exit 0 if the credential agent's kubeconfig exists and is not empty. With --wait, keep checking
until it does or the time is up. The webhook injects this as the sidecar's postStart hook for tools that
are not this binary's runners: the kubelet starts the tool container only after the hook returns, so such a
tool never starts without its credential. This binary's runners go without the hook and wait for the file
themselves.`,
		Args: cli.Usage(cobra.NoArgs),
		RunE: cli.RunE(o),
	}
	cmd.Flags().StringVar(&o.File, "file", contract.KubeconfigPath, "the kubeconfig the agent writes")
	cmd.Flags().DurationVar(&o.Wait, "wait", 0, "keep checking this long (0: check once)")
	return cmd
}

// Complete fills the default path.
func (o *credAgentReadyOptions) Complete() error {
	if o.File == "" {
		o.File = contract.KubeconfigPath
	}
	return nil
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
			return cli.ExitError{Code: 1}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// EventCredentialFailed is a warm Pod's agent reporting that it could not issue the claimed call's
// credential; it stays up (a native sidecar that exits is restarted) and the warm entry point gives up.
const EventCredentialFailed = "credential.failed"

// claimedMarker, in the agent's own memory volume, records that this Pod's claim was served: a restarted
// sidecar must never issue a second credential for the same claim.
const claimedMarker = ".claimed"

// issuedMarker, in the same volume, records that a cold Pod's agent started issuing: a restarted sidecar
// issues nothing.
const issuedMarker = ".issued"

// runWarm serves a warm Pod's one claim: wait for it, issue its credential, revoke when the tool is done.
func (o *credAgentOptions) runWarm(ctx context.Context) error {
	emit := func(event string, fields map[string]any) {
		fields["event"] = event
		fields["time"] = time.Now().UTC().Format(time.RFC3339Nano)
		if b, err := json.Marshal(fields); err == nil {
			fmt.Fprintln(o.streams.Out, string(b))
		}
	}
	fail := func(err error) error {
		line := oneLineError(nil, err)
		emit(EventCredentialFailed, map[string]any{"error": line})
		fmt.Fprintf(o.streams.ErrOut, "cred-agent: %s\n", line)
		<-ctx.Done()
		return nil
	}
	v, err := newClaimVerifier(o.ClaimKeys, o.ClaimSpec)
	if err != nil {
		return fail(err)
	}
	// Nothing is minted for a claim that admission did not sign for this Pod, or whose argv or namespace
	// is not the tool's rendering of its parameters.
	claim, err := waitClaim(ctx, o.ClaimFile, claimPollAgent, v.verify)
	if err != nil {
		return fail(err)
	}
	if claim == nil {
		return nil // stopped before any claim: nothing was issued, nothing to revoke
	}
	marker := filepath.Join(filepath.Dir(o.Agent.Out), claimedMarker)
	f, err := os.OpenFile(marker, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fail(fmt.Errorf("this Pod's claim %s was already served (the agent restarted): no second credential", claim.RequestID))
	}
	f.Close()
	emit("claim.accepted", map[string]any{"request_id": claim.RequestID, "namespace": claim.Namespace})
	cfg := o.config()
	cfg.Namespace = claim.Namespace
	agent, err := broker.NewAgent(cfg)
	if err != nil {
		return fail(err)
	}
	if err := agent.Run(ctx); err != nil {
		line := oneLineError(agent.Scrubber(), err)
		emit(EventCredentialFailed, map[string]any{"error": line})
		fmt.Fprintf(o.streams.ErrOut, "cred-agent: %s\n", line)
		<-ctx.Done()
	}
	return nil
}

// How often a warm Pod looks for its claim. Under gVisor (systrap, no KVM) every look is expensive: a wake-up,
// a stat and above all a read of the downward-API file each cost CPU, and reading the claim often from two
// processes kept an idle warm Pod busy (docs/design/measurements.md, "warm Pod claim polling"). So the claim is
// looked for with a stat (the file is empty until the claim annotation lands and a claim never changes
// after admission), and only the agent — whose Vault login starts the call — looks often. The entry point
// needs the claim only once the credential is there, a few hundred milliseconds later, and looks rarely.
const (
	claimPollAgent = 40 * time.Millisecond
	claimPollEntry = 100 * time.Millisecond
)

// waitClaim waits, looking every `every`, until the claim file holds a claim, and returns what verify makes
// of its exact bytes; nil when ctx ends first.
func waitClaim(ctx context.Context, path string, every time.Duration, verify func(path, raw string) (*sandbox.Claim, error)) (*sandbox.Claim, error) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		fi, err := os.Stat(path)
		if err != nil && !os.IsNotExist(err) {
			return nil, fmt.Errorf("read the claim: %w", err)
		}
		if err == nil && fi.Size() > 0 {
			b, err := os.ReadFile(path)
			if err != nil {
				return nil, fmt.Errorf("read the claim: %w", err)
			}
			if len(strings.TrimSpace(string(b))) > 0 {
				return verify(path, string(b))
			}
		}
		select {
		case <-ctx.Done():
			return nil, nil
		case <-t.C:
		}
	}
}

// claimVerifier is what a warm Pod checks a claim against before it mints or runs anything (issue 22, "a
// warm Pod runs only what admission admitted"): the admission webhook's signature of exactly these claim
// bytes for exactly this Pod (--claim-keys, rendered into the Pod by the webhook's injection), and the
// tool's own rendering of the claim's parameters (--claim-spec): the argv and the target namespace must be
// it. A claim that reached the Pod without admission — through the pods/status subresource, which the API
// server lets change annotations — is refused here.
type claimVerifier struct {
	keys []ed25519.PublicKey
	spec *policy.ClaimSpec
}

func newClaimVerifier(keys, spec string) (*claimVerifier, error) {
	k, err := sandbox.ParseClaimKeys(keys)
	if err != nil {
		return nil, err
	}
	if spec == "" {
		return nil, errors.New("no claim spec (--claim-spec): a warm Pod cannot check its claim's argv")
	}
	s, err := policy.ParseClaimSpec(spec)
	if err != nil {
		return nil, err
	}
	return &claimVerifier{keys: k, spec: s}, nil
}

// verify checks raw, the claim file's exact content, read from path.
func (v *claimVerifier) verify(path, raw string) (*sandbox.Claim, error) {
	sig, pod, err := sandbox.ReadClaimFiles(path)
	if err != nil {
		return nil, fmt.Errorf("refused the claim: %w", err)
	}
	c, err := sandbox.VerifyClaim(v.keys, pod, raw, sig)
	if err != nil {
		return nil, fmt.Errorf("refused the claim: %w", err)
	}
	if c.Tool != v.spec.Tool {
		return nil, fmt.Errorf("refused the claim %s: it is for tool %q, this Pod runs %s", c.RequestID, c.Tool, v.spec.Tool)
	}
	argv, ns, err := v.spec.Render(c.Params)
	if err != nil {
		return nil, fmt.Errorf("refused the claim %s: its parameters: %w", c.RequestID, err)
	}
	if !slices.Equal(argv, c.Argv) {
		return nil, fmt.Errorf("refused the claim %s: its argv %q is not the tool's rendering %q", c.RequestID, c.Argv, argv)
	}
	if ns != c.Namespace {
		return nil, fmt.Errorf("refused the claim %s: it targets namespace %q, its parameters %q", c.RequestID, c.Namespace, ns)
	}
	return c, nil
}

// VerifyWarmClaim is the check a warm Pod's entry point and credential agent make before anything is run
// or minted, for the claim volume whose claim file is claimPath, with the Pod's --claim-keys and
// --claim-spec values (the integration tests run it on what the API server holds).
func VerifyWarmClaim(claimPath, claimKeys, claimSpec string) (*sandbox.Claim, error) {
	v, err := newClaimVerifier(claimKeys, claimSpec)
	if err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(claimPath)
	if err != nil {
		return nil, fmt.Errorf("read the claim: %w", err)
	}
	return v.verify(claimPath, string(raw))
}
