package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/runner"
)

// newRunCommand builds `agent-sandbox run`, the tool entry points a sandbox Job's container runs.
func newRunCommand(streams IO) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run one tool inside a sandbox Pod (what a sandbox Job's tool container executes)",
		Long: `run holds the tools that sandbox Jobs execute. Each one talks to the cluster only with the per-action
kubeconfig the credential agent wrote ($KUBECONFIG), prints exactly one JSON object as the last line on
stdout, its result or {"error": "..."} (then it exits 1), and writes everything else to stderr.`,
		Args: cobra.NoArgs,
	}
	// A flag the tool does not know is a failure like any other: report it on the result line.
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return runFail(streams, nil, err) })
	cmd.AddCommand(newRunPodStatusCommand(streams), newRunTerraformPlanCommand(streams), newRunTerraformApplyCommand(streams))
	return cmd
}

// runFail reports err as the {"error": ...} result line and makes the process exit 1.
func runFail(streams IO, log *slog.Logger, err error) error {
	if log != nil {
		log.Error("run failed", "err", runner.ErrorLine(err))
	}
	if werr := runner.WriteError(streams.Out, err); werr != nil {
		return werr
	}
	return exitError{code: 1}
}

// runSucceed prints the result line.
func runSucceed(streams IO, log *slog.Logger, v any) error {
	if err := runner.WriteResult(streams.Out, v); err != nil {
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

func runLogger(streams IO) *slog.Logger {
	return slog.New(slog.NewTextHandler(streams.ErrOut, nil))
}

// runProtect keeps code that a tool runs from forging the tool's result line (see runner.ProtectProcess).
func runProtect(log *slog.Logger) {
	if err := runner.ProtectProcess(); err != nil {
		log.Warn("process not protected", "err", err)
	}
}

// runPodStatusOptions are the flags of `run pod-status`.
type runPodStatusOptions struct {
	Namespace  string
	Selector   string
	Kubeconfig string

	streams IO
	log     *slog.Logger
}

func newRunPodStatusCommand(streams IO) *cobra.Command {
	o := &runPodStatusOptions{streams: streams}
	cmd := &cobra.Command{
		Use:   "pod-status",
		Short: "List the pods of a namespace with phase, readiness, restarts, age and node",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Complete()
			if err := o.Validate(); err != nil {
				return runFail(o.streams, o.log, err)
			}
			return o.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Namespace, "namespace", "", "namespace to list pods in")
	f.StringVar(&o.Selector, "selector", "", "label selector, e.g. app=web (default: all pods)")
	f.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig file (default $KUBECONFIG, else "+contract.KubeconfigPath+")")
	return cmd
}

// Complete fills the kubeconfig and the logger.
func (o *runPodStatusOptions) Complete() {
	o.Kubeconfig = runKubeconfig(o.Kubeconfig)
	o.log = runLogger(o.streams)
}

// Validate checks the namespace and the selector.
func (o *runPodStatusOptions) Validate() error {
	var errs []error
	if e := validation.IsDNS1123Label(o.Namespace); len(e) > 0 {
		errs = append(errs, fmt.Errorf("--namespace %q: not a valid namespace name", o.Namespace))
	}
	if _, err := runner.ParseSelector(o.Selector); err != nil {
		errs = append(errs, fmt.Errorf("--selector: %w", err))
	}
	return errors.Join(errs...)
}

// Run lists the pods and prints the result.
func (o *runPodStatusOptions) Run(ctx context.Context) error {
	runProtect(o.log)
	client, err := runner.NewClient(o.Kubeconfig)
	if err != nil {
		return runFail(o.streams, o.log, err)
	}
	res, err := runner.ListPodStatus(ctx, client, runner.PodStatusOptions{Namespace: o.Namespace, Selector: o.Selector})
	if err != nil {
		return runFail(o.streams, o.log, err)
	}
	return runSucceed(o.streams, o.log, res)
}

// runTerraformOptions are the flags shared by `run terraform-plan` and `run terraform-apply`.
type runTerraformOptions struct {
	Workspace  string
	Source     string
	Namespace  string
	Kubeconfig string

	streams IO
	log     *slog.Logger
}

func (o *runTerraformOptions) bind(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.Workspace, "workspace", "", "workspace name: the state is Secret tfstate-default-<workspace> in --namespace")
	f.StringVar(&o.Source, "source", "/workspace", "folder holding the workspace's files (the mounted ConfigMap)")
	f.StringVar(&o.Namespace, "namespace", "", "namespace of the state, its lock and the saved plans")
	f.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig file (default $KUBECONFIG, else "+contract.KubeconfigPath+")")
}

// Complete fills the kubeconfig and the logger.
func (o *runTerraformOptions) Complete() {
	o.Kubeconfig = runKubeconfig(o.Kubeconfig)
	o.log = runLogger(o.streams)
}

// Validate checks every flag.
func (o *runTerraformOptions) Validate() error {
	opts := o.runnerOptions()
	return opts.Validate()
}

func (o *runTerraformOptions) runnerOptions() runner.TerraformOptions {
	return runner.TerraformOptions{
		Workspace: o.Workspace, Source: o.Source, Namespace: o.Namespace, Kubeconfig: o.Kubeconfig,
		Stderr: o.streams.ErrOut, Log: o.log,
	}
}

func newRunTerraformPlanCommand(streams IO) *cobra.Command {
	o := &runTerraformOptions{streams: streams}
	cmd := &cobra.Command{
		Use:   "terraform-plan",
		Short: "Plan a Terraform workspace and save the plan for terraform-apply",
		Long: `terraform-plan copies the workspace's *.tf, *.tfvars and .terraform.lock.hcl into a fresh folder, keeps the
state in Secret tfstate-default-<workspace> of --namespace, runs terraform init and plan, stores the saved
plan unchanged in Secret tfplan-<first 16 hex digits of its SHA-256> and prints the plan ID (the full
SHA-256), the changes per resource and the plan as text. Terraform's own output goes to stderr.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Complete()
			if err := o.Validate(); err != nil {
				return runFail(o.streams, o.log, err)
			}
			return o.RunPlan(cmd.Context())
		},
	}
	o.bind(cmd)
	return cmd
}

// RunPlan plans and prints the PlanResult.
func (o *runTerraformOptions) RunPlan(ctx context.Context) error {
	runProtect(o.log)
	client, err := runner.NewClient(o.Kubeconfig)
	if err != nil {
		return runFail(o.streams, o.log, err)
	}
	res, err := runner.Plan(ctx, client, o.runnerOptions())
	if err != nil {
		return runFail(o.streams, o.log, err)
	}
	return runSucceed(o.streams, o.log, res)
}

// runTerraformApplyOptions are the flags of `run terraform-apply`.
type runTerraformApplyOptions struct {
	runTerraformOptions
	PlanID string
}

func newRunTerraformApplyCommand(streams IO) *cobra.Command {
	o := &runTerraformApplyOptions{runTerraformOptions: runTerraformOptions{streams: streams}}
	cmd := &cobra.Command{
		Use:   "terraform-apply",
		Short: "Apply exactly one saved plan, by plan ID",
		Long: `terraform-apply reads Secret tfplan-<first 16 hex digits of --plan-id>, refuses it unless its bytes hash to
exactly --plan-id and it was made for --workspace, runs terraform init and applies it. Terraform refuses a
plan made against a state that has changed since (a stale plan). An applied plan's Secret is deleted.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Complete()
			if err := o.Validate(); err != nil {
				return runFail(o.streams, o.log, err)
			}
			return o.Run(cmd.Context())
		},
	}
	o.bind(cmd)
	cmd.Flags().StringVar(&o.PlanID, "plan-id", "", "SHA-256 of the saved plan to apply (from terraform-plan)")
	return cmd
}

// Validate checks every flag.
func (o *runTerraformApplyOptions) Validate() error {
	return errors.Join(o.runTerraformOptions.Validate(), runner.ValidatePlanID(o.PlanID))
}

// Run applies the plan and prints the ApplyResult.
func (o *runTerraformApplyOptions) Run(ctx context.Context) error {
	runProtect(o.log)
	client, err := runner.NewClient(o.Kubeconfig)
	if err != nil {
		return runFail(o.streams, o.log, err)
	}
	res, err := runner.Apply(ctx, client, o.runnerOptions(), o.PlanID)
	if err != nil {
		return runFail(o.streams, o.log, err)
	}
	return runSucceed(o.streams, o.log, res)
}
