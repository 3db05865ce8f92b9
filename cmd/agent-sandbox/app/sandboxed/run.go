package sandboxed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"github.com/agent-sandbox/agent-sandbox/broker"
	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/cli"
	"github.com/agent-sandbox/agent-sandbox/internal/atomicfile"
	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/scrub"
	"github.com/agent-sandbox/agent-sandbox/internal/tfcheck"
	"github.com/agent-sandbox/agent-sandbox/internal/toolrun"
)

// NewRunCommand builds `agent-sandbox run`, the tool entry points a sandbox Job's container runs; main is
// the root's Main, through which `run warm` runs a claimed tool of this binary in its own process, as a
// child would parse it.
func NewRunCommand(streams cli.IO, main cli.MainFunc) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run one tool inside a sandbox Pod (what a sandbox Job's tool container executes)",
		Long: `run holds the tools that sandbox Jobs execute. Each one talks to the cluster only with the per-action
kubeconfig the credential agent wrote ($KUBECONFIG) — in a sandbox it waits for the agent to write it — and
writes exactly one JSON object, its result or {"error": "..."} (then it exits 1), to its result file: ` + contract.ResultPath + ` in a sandbox, where the
credential agent reports it on its own output stream once the tool has exited (outside a sandbox, when
that folder does not exist, to stdout). Everything else goes to stderr, scrubbed of the credential.

tf-check runs before the credential agent, in an init container: it checks a workspace or a saved plan
against the allowlist and, if it refuses, writes the reason to its termination message and exits 1.`,
		Args: cli.Usage(cobra.NoArgs),
	}
	// A flag the tool does not know is a failure like any other: report it on the result line.
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return runFail(streams, nil, err) })
	cmd.AddCommand(newRunPodStatusCommand(streams), newRunTerraformPlanCommand(streams), newRunTerraformApplyCommand(streams),
		newRunTFCheckCommand(streams), newRunWarmCommand(streams, main), newRunPodLogsCommand(streams), newRunEventsCommand(streams),
		newRunDescribeCommand(streams), newRunRolloutStatusCommand(streams), newRunTerraformShowCommand(streams))
	return cmd
}

// resultWriter is where a tool's result goes: the result file in a sandbox, stdout elsewhere.
func resultWriter(streams cli.IO) (io.Writer, func() error, error) {
	if fi, err := os.Stat(contract.ResultDir); err != nil || !fi.IsDir() {
		return streams.Out, func() error { return nil }, nil
	}
	f, err := os.OpenFile(contract.ResultPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("result file: %w", err)
	}
	return f, f.Close, nil
}

// runFail reports err as the {"error": ...} result and makes the process exit 1.
func runFail(streams cli.IO, log *slog.Logger, err error) error {
	if log != nil {
		log.Error("run failed", "err", toolrun.ErrorLine(err))
	}
	w, done, werr := resultWriter(streams)
	if werr == nil {
		werr = toolrun.WriteError(w, err)
		werr = errors.Join(werr, done())
	}
	if werr != nil {
		return werr
	}
	return cli.ExitError{Code: 1}
}

// runSucceed writes the result.
func runSucceed(streams cli.IO, log *slog.Logger, v any) error {
	w, done, err := resultWriter(streams)
	if err == nil {
		err = errors.Join(toolrun.WriteResult(w, v), done())
	}
	if err != nil {
		return runFail(streams, log, err)
	}
	return nil
}

// runKubeconfig is the kubeconfig a tool uses: the flag, else $KUBECONFIG, else where the credential
// agent writes it.
func runKubeconfig(flag string) string {
	if flag != "" {
		return flag
	}
	if env := os.Getenv("KUBECONFIG"); env != "" {
		return env
	}
	return contract.KubeconfigPath
}

// credentialWait is how long a tool waits in a sandbox for the credential agent's kubeconfig: the agent's
// Vault login timeout, and some.
var credentialWait = broker.DefaultLoginTimeout + 10*time.Second

// credentialDir is the credential agent's volume in a sandbox (a variable for tests).
var credentialDir = contract.CredentialDir

// toolClient is the tool's Kubernetes client from the kubeconfig at path. In a sandbox — path inside the
// credential agent's volume, which is mounted — it first waits for the agent to write the file: the
// project's own runners start beside the agent, not after it (webhook.WaitsForCredential). Elsewhere a
// missing file is an error at once.
func toolClient(ctx context.Context, path string) (kubernetes.Interface, error) {
	if err := awaitCredential(ctx, path); err != nil {
		return nil, err
	}
	return toolrun.NewClient(path)
}

// awaitCredential waits, in a sandbox, for the credential agent to write the kubeconfig at path (see
// toolClient); elsewhere it returns at once. A runner that checks its kubeconfig among its flags calls it
// first: the agent starts beside the tool, and a check before it has written would fail a good call.
func awaitCredential(ctx context.Context, path string) error {
	if filepath.Dir(path) == credentialDir {
		if fi, err := os.Stat(credentialDir); err == nil && fi.IsDir() {
			return waitKubeconfig(ctx, path, credentialWait)
		}
	}
	return nil
}

func runLogger(streams cli.IO) *slog.Logger {
	return slog.New(slog.NewTextHandler(streams.ErrOut, nil))
}

// runProtect keeps code that a tool runs from forging the tool's result line (see toolrun.ProtectProcess).
func runProtect(log *slog.Logger) {
	if err := toolrun.ProtectProcess(); err != nil {
		log.Warn("process not protected", "err", err)
	}
}

// clusterTool is what every tool that talks to the cluster has: the kubeconfig it talks with, the streams, and
// the logger Complete makes.
type clusterTool struct {
	Kubeconfig string

	streams cli.IO
	log     *slog.Logger
}

func (o *clusterTool) bindKubeconfig(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig file (default $KUBECONFIG, else "+contract.KubeconfigPath+")")
}

// Complete fills the kubeconfig and the logger.
func (o *clusterTool) Complete() {
	o.Kubeconfig = runKubeconfig(o.Kubeconfig)
	o.log = runLogger(o.streams)
}

// fail reports err as the tool's {"error": ...} result (runFail).
func (o *clusterTool) fail(err error) error { return runFail(o.streams, o.log, err) }

// runWithClient protects the process, builds the tool's client, calls call with it and writes what it returns:
// the result, or its error as the error line.
func (o *clusterTool) runWithClient(ctx context.Context, call func(context.Context, kubernetes.Interface) (any, error)) error {
	runProtect(o.log)
	client, err := toolClient(ctx, o.Kubeconfig)
	if err != nil {
		return o.fail(err)
	}
	res, err := call(ctx, client)
	if err != nil {
		return o.fail(err)
	}
	return runSucceed(o.streams, o.log, res)
}

// runPodStatusOptions are the flags of `run pod-status`.
type runPodStatusOptions struct {
	Namespace string
	Selector  string
	clusterTool
}

func newRunPodStatusCommand(streams cli.IO) *cobra.Command {
	o := &runPodStatusOptions{clusterTool: clusterTool{streams: streams}}
	cmd := &cobra.Command{
		Use:   "pod-status",
		Short: "List the pods of a namespace with phase, readiness, restarts, age and node",
		Args:  cli.Usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Complete()
			if err := o.Validate(); err != nil {
				return o.fail(err)
			}
			return o.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Namespace, "namespace", "", "namespace to list pods in")
	f.StringVar(&o.Selector, "selector", "", "label selector, e.g. app=web (default: all pods)")
	o.bindKubeconfig(cmd)
	return cmd
}

// Validate checks the namespace and the selector.
func (o *runPodStatusOptions) Validate() error {
	var errs []error
	if e := validation.IsDNS1123Label(o.Namespace); len(e) > 0 {
		errs = append(errs, fmt.Errorf("--namespace %q: not a valid namespace name", o.Namespace))
	}
	if _, err := toolrun.ParseSelector(o.Selector); err != nil {
		errs = append(errs, fmt.Errorf("--selector: %w", err))
	}
	return errors.Join(errs...)
}

// Run lists the pods and prints the result.
func (o *runPodStatusOptions) Run(ctx context.Context) error {
	return o.runWithClient(ctx, func(ctx context.Context, client kubernetes.Interface) (any, error) {
		return toolrun.ListPodStatus(ctx, client, toolrun.PodStatusOptions{Namespace: o.Namespace, Selector: o.Selector})
	})
}

// runTerraformOptions are the flags shared by `run terraform-plan` and `run terraform-apply`.
type runTerraformOptions struct {
	Workspace string
	Source    string
	Namespace string
	// PlanRules is the policy's plan rules as JSON (terraform-plan only).
	PlanRules string
	// SavePlan is where terraform-plan also writes the saved plan (terraform-plan only, outside a sandbox).
	SavePlan string

	planRules *policy.PlanRuleSet
	clusterTool
}

func (o *runTerraformOptions) bind(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.Workspace, "workspace", "", "workspace name: the state is Secret tfstate-default-<workspace> in --namespace")
	f.StringVar(&o.Source, "source", "/workspace", "folder holding the workspace's files (the mounted ConfigMap)")
	f.StringVar(&o.Namespace, "namespace", "", "namespace of the state, its lock and the saved plans")
	o.bindKubeconfig(cmd)
}

// runE is the RunE of terraform-plan and terraform-apply: complete the flags, wait for the credential agent
// to write the kubeconfig (validate checks the file), validate them and run. A failure at any step is the
// tool's error line.
func (o *runTerraformOptions) runE(validate func() error, run func(context.Context) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		o.Complete()
		if err := awaitCredential(cmd.Context(), o.Kubeconfig); err != nil {
			return o.fail(err)
		}
		if err := validate(); err != nil {
			return o.fail(err)
		}
		return run(cmd.Context())
	}
}

// Validate checks every flag.
func (o *runTerraformOptions) Validate() error {
	opts := o.runnerOptions()
	err := opts.Validate()
	if o.PlanRules != "" {
		rules, perr := policy.ParsePlanRules(o.PlanRules)
		if perr != nil {
			return errors.Join(err, fmt.Errorf("--plan-rules: %w", perr))
		}
		o.planRules = rules
	}
	return err
}

func (o *runTerraformOptions) runnerOptions() toolrun.TerraformOptions {
	return toolrun.TerraformOptions{
		Workspace: o.Workspace, Source: o.Source, Namespace: o.Namespace, Kubeconfig: o.Kubeconfig,
		Stderr: o.streams.ErrOut, Log: o.log, PlanRules: o.planRules,
	}
}

func newRunTerraformPlanCommand(streams cli.IO) *cobra.Command {
	o := &runTerraformOptions{clusterTool: clusterTool{streams: streams}}
	cmd := &cobra.Command{
		Use:   "terraform-plan",
		Short: "Plan a Terraform workspace and save the plan for terraform-apply",
		Long: `terraform-plan checks the workspace's files against the allowlist (parsed, never grepped: no program, no
file outside the workspace, no provider but kubernetes), copies them into a fresh folder with the current
state (read from Secret tfstate-default-<workspace> of --namespace), runs terraform init and plan without
taking a lock or writing anything to the cluster, and reports the plan ID (the saved plan's SHA-256), the
changes per resource, the plan as text and the saved plan itself. Terraform's own output goes to stderr.

With --plan-rules (the policy's spec.planRules as JSON, which the policy renders into the Job) it judges every
resource change by them: a plan they refuse fails with the rule, the resource and the rule's message, and is
never saved; the result says how many distinct approvers the policy's two-person rules ask for.`,
		Args: cli.Usage(cobra.NoArgs),
		RunE: o.runE(o.Validate, o.RunPlan),
	}
	o.bind(cmd)
	cmd.Flags().StringVar(&o.PlanRules, "plan-rules", "", "the policy's plan rules as JSON: a plan they refuse is not saved")
	cmd.Flags().StringVar(&o.SavePlan, "save-plan", "", "also write the saved plan to this file (mode 0600), for terraform-apply --plan-file outside a sandbox; its SHA-256 is the plan ID")
	return cmd
}

// RunPlan plans and prints the PlanResult.
func (o *runTerraformOptions) RunPlan(ctx context.Context) error {
	return o.runWithClient(ctx, func(ctx context.Context, client kubernetes.Interface) (any, error) {
		res, err := toolrun.Plan(ctx, client, o.runnerOptions())
		// Outside a sandbox (scripts/demo-setup.sh) the caller applies the plan itself, from a file.
		if err == nil && o.SavePlan != "" && len(res.Plan) > 0 {
			err = atomicfile.Write(o.SavePlan, res.Plan, 0o600)
		}
		return res, err
	})
}

// runTerraformApplyOptions are the flags of `run terraform-apply`.
type runTerraformApplyOptions struct {
	runTerraformOptions
	PlanID   string
	PlanFile string
}

func newRunTerraformApplyCommand(streams cli.IO) *cobra.Command {
	o := &runTerraformApplyOptions{runTerraformOptions: runTerraformOptions{clusterTool: clusterTool{streams: streams}}}
	cmd := &cobra.Command{
		Use:   "terraform-apply",
		Short: "Apply exactly one saved plan, by plan ID",
		Long: `terraform-apply reads the saved plan in --plan-file (the mounted ConfigMap tfplan-<plan ID>), refuses it
unless its bytes hash to exactly --plan-id and it passes the allowlist (the configuration it embeds, which is
what Terraform applies, and the backend it records), takes the workspace's state lock, runs terraform init
with the plan's own configuration and applies it. Terraform refuses a plan made against a state that has
changed since (a stale plan). The new state is written back to Secret tfstate-default-<workspace>.`,
		Args: cli.Usage(cobra.NoArgs),
		RunE: o.runE(o.Validate, o.Run),
	}
	o.bind(cmd)
	cmd.Flags().StringVar(&o.PlanID, "plan-id", "", "SHA-256 of the saved plan to apply (from terraform-plan)")
	cmd.Flags().StringVar(&o.PlanFile, "plan-file", "/plan/tfplan", "the saved plan (the mounted ConfigMap)")
	return cmd
}

// Validate checks every flag.
func (o *runTerraformApplyOptions) Validate() error {
	return errors.Join(o.runTerraformOptions.Validate(), toolrun.ValidatePlanID(o.PlanID))
}

// Run applies the plan and prints the ApplyResult.
func (o *runTerraformApplyOptions) Run(ctx context.Context) error {
	return o.runWithClient(ctx, func(ctx context.Context, client kubernetes.Interface) (any, error) {
		return toolrun.Apply(ctx, client, o.runnerOptions(), o.PlanFile, o.PlanID)
	})
}

// checkPlan checks the saved plan against its ID and the allowlist and, with --plan-rules, judges it.
func (o *runTFCheckOptions) checkPlan(ctx context.Context) error {
	plan, _, err := toolrun.LoadPlan(o.PlanFile, o.PlanID)
	if err != nil || o.PlanRules == "" {
		return err
	}
	rules, err := policy.ParsePlanRules(o.PlanRules)
	if err != nil {
		return fmt.Errorf("--plan-rules: %w", err)
	}
	var approvers []string
	if o.Approvers != "" {
		approvers = strings.Split(o.Approvers, ",")
	}
	_, err = toolrun.CheckPlanRules(ctx, plan, rules, approvers, toolrun.ShowOptions{ProviderMirror: o.ProviderMirror, Stderr: o.streams.ErrOut})
	return err
}

// runTFCheckOptions are the flags of `run tf-check`.
type runTFCheckOptions struct {
	Source   string
	PlanFile string
	PlanID   string
	// PlanRules (JSON) and Approvers (comma-separated key IDs) judge a saved plan's content.
	PlanRules      string
	Approvers      string
	ProviderMirror string

	streams cli.IO
}

func newRunTFCheckCommand(streams cli.IO) *cobra.Command {
	o := &runTFCheckOptions{streams: streams}
	cmd := &cobra.Command{
		Use:   "tf-check",
		Short: "Check a Terraform workspace (--source) or saved plan (--plan-file, --plan-id) against the allowlist",
		Long: `tf-check parses a workspace's files, or a saved plan's embedded configuration and recorded backend, and
refuses anything the allowlist does not admit: programs (provider exec plugins, provisioners, external
data), other providers, modules, backends, file functions, terraform.applying, Secrets. In a sandbox it
runs in an init container before the credential agent, so a refused input never gets a credential; the
reason goes to stderr and to the termination message (/dev/termination-log). Exit 0: admitted; exit 1:
refused or unreadable.

With --plan-file and --plan-rules (the policy's spec.planRules as JSON, rendered into the Job by the policy)
it also judges what the saved plan does: Terraform describes it here, without any cluster or credential
(terraform init with the provider from --provider-mirror, terraform show -json), every resource change is
evaluated by the rules, and a refused change refuses the plan whatever approval the Job carries. --approvers
lists the distinct approvers whose tokens the webhook verified for this Job; a plan that a two-person rule
says needs more is refused ("1 of 2 approvals").`,
		Args: cli.Usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error { return o.Run(cmd.Context()) },
	}
	f := cmd.Flags()
	f.StringVar(&o.Source, "source", "", "workspace folder to check")
	f.StringVar(&o.PlanFile, "plan-file", "", "saved plan to check")
	f.StringVar(&o.PlanID, "plan-id", "", "the SHA-256 the saved plan must have")
	f.StringVar(&o.PlanRules, "plan-rules", "", "with --plan-file: the policy's plan rules as JSON, to judge what the plan does")
	f.StringVar(&o.Approvers, "approvers", "", "with --plan-rules: the distinct approvers' key IDs, comma-separated")
	f.StringVar(&o.ProviderMirror, "provider-mirror", toolrun.ImageProviderMirror, "filesystem mirror of the kubernetes provider terraform reads the plan with")
	return cmd
}

// Run checks and reports.
func (o *runTFCheckOptions) Run(ctx context.Context) error {
	var err error
	switch {
	case (o.Source == "") == (o.PlanFile == ""):
		err = errors.New("give exactly one of --source and --plan-file")
	case o.PlanRules != "" && o.PlanFile == "":
		err = errors.New("--plan-rules judges a saved plan: give --plan-file")
	case o.Approvers != "" && o.PlanRules == "":
		err = errors.New("--approvers goes with --plan-rules")
	case o.Source != "":
		_, err = tfcheck.CheckDir(o.Source, toolrun.CheckOptions())
	default:
		err = o.checkPlan(ctx)
	}
	if err == nil {
		fmt.Fprintln(o.streams.ErrOut, "tf-check: admitted")
		return nil
	}
	msg := scrub.String(err.Error())
	fmt.Fprintln(o.streams.ErrOut, msg)
	// The termination message is what the MCP server shows: the kubelet keeps at most 4 KiB of it.
	if len(msg) > 4000 {
		msg = msg[:4000] + "..."
	}
	if _, serr := os.Stat("/dev/termination-log"); serr == nil {
		_ = os.WriteFile("/dev/termination-log", []byte(msg), 0o644)
	}
	return cli.ExitError{Code: 1}
}
