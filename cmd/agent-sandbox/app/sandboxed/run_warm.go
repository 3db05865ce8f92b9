package sandboxed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/agent-sandbox/agent-sandbox/broker"
	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/cli"
	"github.com/agent-sandbox/agent-sandbox/internal/atomicfile"
	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
)

// runWarmOptions are the flags of `run warm`, the entry point of a warm Pod's tool container.
type runWarmOptions struct {
	Tool           string
	ClaimFile      string
	ClaimKeys      string
	ClaimSpec      string
	DoneFile       string
	Kubeconfig     string
	IdleTimeout    time.Duration
	Deadline       time.Duration
	CredentialWait time.Duration

	streams cli.IO
	// main runs a claimed tool of this binary in process (the root's Main).
	main cli.MainFunc
	// ranInProcess records that the claimed tool ran in this process (logged with its end).
	ranInProcess bool
}

func newRunWarmCommand(streams cli.IO, main cli.MainFunc) *cobra.Command {
	o := &runWarmOptions{streams: streams, main: main}
	cmd := &cobra.Command{
		Use:   "warm",
		Short: "Wait for this warm Pod's claim, then run exactly the claimed argv (a warm Pod's tool container)",
		Long: `warm is what a warm Pod's tool container runs (docs/design/warm-pool.md). It waits for the Pod's claim
(--claim-file, the downward-API file of the claim annotation, which the admission webhook admitted only as
the policy's rendering of the call), verifies the webhook's signature of it for this Pod (--claim-keys) and
that its argv is the tool's rendering of its parameters (--claim-spec) — a claim that fails either is
refused and nothing runs — then waits for the credential agent's kubeconfig, then executes the claim's
argv — directly, no shell — with the tool's deadline, and finally writes --done-file so that the agent
revokes the credential and reports the result at once. Its exit code is the tool's. Unclaimed after
--idle-timeout it exits 0, and the pool replaces the Pod.`,
		Args: cli.Usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return runFail(streams, nil, err)
			}
			return o.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Tool, "tool", "", "the tool this warm Pod runs (a claim for another is refused)")
	f.StringVar(&o.ClaimFile, "claim-file", contract.ClaimPath, "the claim file")
	f.StringVar(&o.ClaimKeys, "claim-keys", "", "the admission webhook's claim-signing public keys (comma-separated base64url Ed25519, rendered by its injection); a claim without a valid signature for this Pod is refused")
	f.StringVar(&o.ClaimSpec, "claim-spec", "", "the tool's argv template and parameters (JSON, from the warm rendering); a claim whose argv or namespace is not their rendering is refused")
	f.StringVar(&o.DoneFile, "done-file", contract.DonePath, "the marker written once the tool has exited")
	f.StringVar(&o.Kubeconfig, "kubeconfig", contract.KubeconfigPath, "the kubeconfig the credential agent writes")
	f.DurationVar(&o.IdleTimeout, "idle-timeout", 10*time.Minute, "exit 0 if no claim arrives within this time")
	f.DurationVar(&o.Deadline, "deadline", time.Minute, "the claimed tool's deadline")
	f.DurationVar(&o.CredentialWait, "credential-wait", broker.DefaultLoginTimeout+10*time.Second, "give up when the credential has not arrived this long after the claim")
	return cmd
}

// Validate checks the flags.
func (o *runWarmOptions) Validate() error {
	var errs []error
	if o.Tool == "" {
		errs = append(errs, errors.New("--tool is required"))
	}
	if o.IdleTimeout <= 0 || o.Deadline <= 0 || o.CredentialWait <= 0 {
		errs = append(errs, errors.New("--idle-timeout, --deadline and --credential-wait must be positive"))
	}
	if _, err := newClaimVerifier(o.ClaimKeys, o.ClaimSpec); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Run waits for the claim, then the credential, then runs the claimed argv.
func (o *runWarmOptions) Run(ctx context.Context) error {
	log := runLogger(o.streams)
	v, err := newClaimVerifier(o.ClaimKeys, o.ClaimSpec)
	if err != nil {
		return o.finish(runFail(o.streams, log, err))
	}
	idle, cancel := context.WithTimeout(ctx, o.IdleTimeout)
	// Nothing runs that admission did not sign for this Pod, or that is not the tool's rendering.
	claim, err := waitClaim(idle, o.ClaimFile, claimPollEntry, v.verify)
	cancel()
	switch {
	case err != nil:
		return o.finish(runFail(o.streams, log, err))
	case claim == nil:
		log.Info("no claim: the warm Pod retires", "idle_timeout", o.IdleTimeout)
		return nil
	case claim.Tool != o.Tool:
		return o.finish(runFail(o.streams, log, fmt.Errorf("the claim is for tool %q, this Pod runs %s", claim.Tool, o.Tool)))
	}
	log.Info("claimed", "request_id", claim.RequestID, "namespace", claim.Namespace)
	claimed := time.Now()
	if err := waitKubeconfig(ctx, o.Kubeconfig, o.CredentialWait); err != nil {
		return o.finish(runFail(o.streams, log, err))
	}
	started := time.Now()
	log.Info("credential ready", "waited_ms", started.Sub(claimed).Milliseconds())
	err = o.exec(ctx, claim)
	log.Info("tool exited", "took_ms", time.Since(started).Milliseconds(), "in_process", o.ranInProcess)
	return o.finish(err)
}

// exec runs the claimed argv with the tool's deadline; the tool writes the result file itself. An argv that
// names this very binary's own tool runners (`<this executable> run <tool> ...`, what every built-in tool
// renders) runs in this process, through the same command line as a child would parse: the Go runtime and
// the runners' packages are already loaded, which saves most of a call's time under gVisor (a child costs
// about half a second: docs/design/measurements.md, "warm tool in process"). Any other argv is
// executed as a child, directly, no shell.
func (o *runWarmOptions) exec(ctx context.Context, claim *sandbox.Claim) error {
	ctx, cancel := context.WithTimeout(ctx, o.Deadline)
	defer cancel()
	if inProcess(claim.Argv) {
		o.ranInProcess = true
		done := make(chan int, 1)
		go func() {
			// A panic in a tool ends the tool, as it would end a child (exit 2), not this entry point: the
			// done marker is still written and the agent revokes at once.
			defer func() {
				if r := recover(); r != nil {
					fmt.Fprintf(o.streams.ErrOut, "the tool panicked: %v\n", r)
					done <- 2
				}
			}()
			done <- o.main(ctx, claim.Argv[1:], nil, o.streams.ErrOut, o.streams.ErrOut)
		}()
		select {
		case code := <-done:
			if code != 0 {
				return cli.ExitError{Code: code}
			}
			return nil
		case <-ctx.Done():
			// The tool ignored its context; the process exits after the done marker, taking it along.
			return runFail(o.streams, nil, fmt.Errorf("the tool exceeded its deadline (%s)", o.Deadline))
		}
	}
	cmd := exec.CommandContext(ctx, claim.Argv[0], claim.Argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, o.streams.ErrOut, o.streams.ErrOut
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if ctx.Err() == context.DeadlineExceeded {
		return runFail(o.streams, nil, fmt.Errorf("the tool exceeded its deadline (%s)", o.Deadline))
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return cli.ExitError{Code: ee.ExitCode()}
	}
	if err != nil {
		return runFail(o.streams, nil, fmt.Errorf("start the tool: %w", err))
	}
	return nil
}

// inProcess reports whether argv runs one of this binary's tool runners: argv[0] is this executable (by
// path, both resolved) and argv[1] is "run" with a runner other than warm itself. Everything else — another
// program, another subcommand — stays a child process.
func inProcess(argv []string) bool {
	if len(argv) == 0 || !contract.RunsTool(argv[1:]) {
		return false
	}
	self, err := os.Executable()
	if err != nil {
		return false
	}
	return samePath(self, argv[0])
}

// samePath compares two paths after resolving symbolic links.
func samePath(a, b string) bool {
	ra, err := filepath.EvalSymlinks(a)
	if err != nil {
		return false
	}
	rb, err := filepath.EvalSymlinks(b)
	if err != nil {
		return false
	}
	return ra == rb
}

// finish writes the done marker whatever happened — holding the exit code, which the credential agent
// reports with the result — so the agent revokes at once, and passes err on.
func (o *runWarmOptions) finish(err error) error {
	code := 0
	var ee cli.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.Code
	case err != nil:
		code = 1
	}
	// Written atomically: the agent never reads a half-written marker.
	_ = atomicfile.Write(o.DoneFile, []byte(strconv.Itoa(code)), 0o644)
	return err
}

// credentialPoll is how often the entry point looks for the credential once it has the claim: a stat of a
// memory-backed file, for the few hundred milliseconds the agent takes to log in and fetch it.
const credentialPoll = 20 * time.Millisecond

// waitKubeconfig waits until the credential agent has written the kubeconfig.
func waitKubeconfig(ctx context.Context, path string, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		if broker.KubeconfigReady(path) == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the credential agent wrote no credential within %s", wait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(credentialPoll):
		}
	}
}
