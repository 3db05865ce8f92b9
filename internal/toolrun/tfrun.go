package toolrun

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/tfcheck"
)

// planFile is the saved plan's name in the working directory; stateFile is where Terraform's implicit
// local backend keeps the default workspace's state.
const (
	planFile  = "plan.tfplan"
	stateFile = "terraform.tfstate"
)

// lockWait is how long an apply waits for the state lock held by another run.
const lockWait = 60 * time.Second

// TerraformOptions are the inputs of Plan and Apply.
type TerraformOptions struct {
	// Workspace names the state: Secret tfstate-default-<Workspace> in Namespace.
	Workspace string
	// Source is the folder holding the workspace's files (the ConfigMap volume, /workspace); Plan only.
	Source string
	// Namespace holds the state and its lock.
	Namespace string
	// Kubeconfig is the per-action kubeconfig, for the provider.
	Kubeconfig string
	// Terraform is the binary ("terraform" on PATH when empty).
	Terraform string
	// Env is the base environment for Terraform (os.Environ() when nil); see TerraformEnv.
	Env []string
	// TempDir is where the working directory is made (os.TempDir() when empty: $TMPDIR or /tmp).
	TempDir string
	// Stderr receives Terraform's output as it runs (io.Discard when nil). The caller scrubs it.
	Stderr io.Writer
	// Log receives progress (nothing when nil).
	Log *slog.Logger
	// PlanRules, when set, judge the plan (Plan only): a plan they refuse is not saved and Plan fails with a
	// *PlanRefusedError naming the rule.
	PlanRules *policy.PlanRuleSet
}

// Validate checks the options, reporting every problem.
func (o *TerraformOptions) Validate() error {
	var errs []error
	if err := ValidateWorkspaceName(o.Workspace); err != nil {
		errs = append(errs, err)
	}
	if len(validation.IsDNS1123Label(o.Namespace)) > 0 {
		errs = append(errs, fmt.Errorf("namespace %q: not a valid namespace name", o.Namespace))
	}
	if o.Kubeconfig == "" {
		errs = append(errs, errors.New("kubeconfig is required (set KUBECONFIG)"))
	} else if err := checkKubeconfig(o.Kubeconfig); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (o *TerraformOptions) complete() error {
	if o.Terraform == "" {
		o.Terraform = "terraform"
	}
	bin, err := exec.LookPath(o.Terraform)
	if err != nil {
		return fmt.Errorf("terraform binary: %w", err)
	}
	o.Terraform = bin
	if o.Env == nil {
		o.Env = os.Environ()
	}
	if o.Stderr == nil {
		o.Stderr = io.Discard
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if abs, err := filepath.Abs(o.Kubeconfig); err == nil {
		o.Kubeconfig = abs
	}
	return o.Validate()
}

// workdir is one prepared Terraform working directory.
type workdir struct {
	tf      *terraform
	dir     string
	timings Timings
}

// prepare makes a fresh working directory with files and the current state, and runs `terraform init`
// (the provider comes from the image's mirror; the backend is the implicit local one). Terraform's output
// is scrubbed by the per-action credential's exact values as it streams. The caller removes the directory.
func prepare(ctx context.Context, o *TerraformOptions, files map[string][]byte, state []byte) (*workdir, error) {
	sc, err := KubeconfigScrubber(o.Kubeconfig)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(o.TempDir, "agent-sandbox-tf-")
	if err != nil {
		return nil, fmt.Errorf("working directory: %w", err)
	}
	w := &workdir{dir: dir, tf: &terraform{bin: o.Terraform, dir: dir, env: TerraformEnv(o.Env, o.Kubeconfig), stderr: o.Stderr, scrub: sc}}
	if err := writeFiles(dir, files); err != nil {
		return w, err
	}
	if state != nil {
		if err := os.WriteFile(filepath.Join(dir, stateFile), state, 0o600); err != nil {
			return w, fmt.Errorf("write state: %w", err)
		}
	}
	start := time.Now()
	if _, _, err := w.tf.run(ctx, false, "init", "-input=false", "-no-color"); err != nil {
		return w, err
	}
	w.timings.Init = seconds(time.Since(start))
	o.Log.Info("terraform init done", "seconds", w.timings.Init)
	return w, nil
}

func (w *workdir) remove(log *slog.Logger) {
	if w == nil {
		return
	}
	if err := os.RemoveAll(w.dir); err != nil {
		log.Warn("remove working directory", "dir", w.dir, "err", err)
	}
}

// show reads a saved plan: its JSON summary and, withText, its human text.
func (w *workdir) show(ctx context.Context, withText bool) (PlanChanges, string, error) {
	start := time.Now()
	js, _, err := w.tf.run(ctx, true, "show", "-json", planFile)
	if err != nil {
		return PlanChanges{}, "", err
	}
	changes, err := ParsePlanJSON(js)
	if err != nil {
		return PlanChanges{}, "", err
	}
	var text []byte
	if withText {
		if text, _, err = w.tf.run(ctx, true, "show", "-no-color", planFile); err != nil {
			return PlanChanges{}, "", err
		}
	}
	w.timings.Show = seconds(time.Since(start))
	return changes, w.tf.scrubText(text), nil
}

// Plan checks the workspace, plans it against the state and returns the saved plan with its description.
// It changes nothing in the cluster: it reads the state Secret by name and the live objects, and takes no
// lock (an apply checks that the state is still the one the plan was made against).
func Plan(ctx context.Context, client kubernetes.Interface, o TerraformOptions) (PlanResult, error) {
	if err := o.complete(); err != nil {
		return PlanResult{}, err
	}
	if o.Source == "" {
		return PlanResult{}, errors.New("source folder is required")
	}
	files, err := loadWorkspace(o.Source)
	if err != nil {
		return PlanResult{}, err
	}
	o.Log.Info("workspace checked", "files", len(files))
	store := &StateStore{Client: client, Namespace: o.Namespace, Workspace: o.Workspace}
	state, err := store.Read(ctx)
	if err != nil {
		return PlanResult{}, err
	}
	w, err := prepare(ctx, &o, files, state.Data)
	defer w.remove(o.Log)
	if err != nil {
		return PlanResult{}, err
	}
	start := time.Now()
	if _, _, err := w.tf.run(ctx, false, "plan", "-input=false", "-no-color", "-lock=false", "-out="+planFile); err != nil {
		return PlanResult{}, err
	}
	w.timings.Plan = seconds(time.Since(start))
	o.Log.Info("terraform plan done", "seconds", w.timings.Plan)
	plan, err := os.ReadFile(filepath.Join(w.dir, planFile))
	if err != nil {
		return PlanResult{}, fmt.Errorf("read saved plan: %w", err)
	}
	if len(plan) > MaxPlanSize {
		return PlanResult{}, fmt.Errorf("the saved plan is %d bytes, more than %d", len(plan), MaxPlanSize)
	}
	// The apply checks the plan again before it runs; checking it here too means a plan that the apply
	// would refuse is never offered for approval.
	if err := tfcheck.CheckPlan(plan, CheckOptions()); err != nil {
		return PlanResult{}, fmt.Errorf("the saved plan: %w", err)
	}
	changes, text, err := w.show(ctx, true)
	if err != nil {
		return PlanResult{}, err
	}
	verdict, err := judge(ctx, o.PlanRules, changes.JSON)
	if err != nil {
		return PlanResult{}, err
	}
	id := PlanID(plan)
	o.Log.Info("plan saved", "plan_id", id, "bytes", len(plan))
	return PlanResult{
		Workspace: o.Workspace,
		PlanID:    id,
		Summary:   changes.Summary,
		Changes:   changes.Changes,
		Text:      text,
		NoChanges: changes.NoChanges,
		Plan:      plan,
		Timings:   w.timings,

		ApprovalsRequired: verdict.Approvals,
		ApprovalRules:     verdict.ApprovalRules,
	}, nil
}

// PlanRefusedError is a plan that the policy's plan rules refuse: it cannot be saved or applied, whatever
// approval it carries.
type PlanRefusedError struct {
	Verdict policy.PlanVerdict
}

func (e *PlanRefusedError) Error() string { return e.Verdict.Error() }

// ErrNotEnoughApprovals means a plan needs more distinct approvers than approved it.
var ErrNotEnoughApprovals = errors.New("not enough approvals")

// judge evaluates the plan rules on `terraform show -json`; nil rules judge nothing (one approver).
func judge(ctx context.Context, rules *policy.PlanRuleSet, showJSON []byte) (policy.PlanVerdict, error) {
	if rules == nil {
		return policy.PlanVerdict{Approvals: 1}, nil
	}
	v, err := rules.EvaluateShowJSON(ctx, showJSON)
	if err != nil {
		return v, fmt.Errorf("judge the plan by the policy's plan rules: %w", err)
	}
	if v.Refused() {
		return v, &PlanRefusedError{Verdict: v}
	}
	return v, nil
}

// CheckPlanRules judges a saved plan by the policy's plan rules, described by Terraform on this machine
// without any cluster or credential (ShowPlan), and counts the distinct approvers: it fails with a
// *PlanRefusedError, or an error wrapping ErrNotEnoughApprovals when a two-person rule asks for more
// approvers than approvers lists. The apply sandbox's check container runs it before the credential agent.
func CheckPlanRules(ctx context.Context, plan []byte, rules *policy.PlanRuleSet, approvers []string, o ShowOptions) (policy.PlanVerdict, error) {
	changes, _, err := ShowPlan(ctx, plan, o)
	if err != nil {
		return policy.PlanVerdict{}, fmt.Errorf("describe the saved plan with terraform: %w", err)
	}
	v, err := judge(ctx, rules, changes.JSON)
	if err != nil {
		return v, err
	}
	distinct := map[string]bool{}
	for _, a := range approvers {
		if a != "" {
			distinct[a] = true
		}
	}
	if len(distinct) < v.Approvals {
		why := ""
		if len(v.ApprovalRules) > 0 {
			why = ": " + v.ApprovalRules[0].String()
		}
		return v, fmt.Errorf("%d of %d approvals: this plan needs %d distinct approvers%s: %w", len(distinct), v.Approvals, v.Approvals, why, ErrNotEnoughApprovals)
	}
	return v, nil
}

// Apply applies exactly the saved plan in planPath, whose SHA-256 must be planID. The plan is checked
// against the allowlist (tfcheck.PlanConfig: the configuration it embeds, which is what Terraform applies,
// and the backend it records) before anything runs, then applied under the workspace's state lock with
// the configuration it embeds; Terraform refuses it if the state changed since it was made (ErrStalePlan).
// The new state is written back to the Secret, also when the apply failed half-way.
func Apply(ctx context.Context, client kubernetes.Interface, o TerraformOptions, planPath, planID string) (res ApplyResult, err error) {
	if err := ValidatePlanID(planID); err != nil {
		return ApplyResult{}, err
	}
	if err := o.complete(); err != nil {
		return ApplyResult{}, err
	}
	plan, config, err := LoadPlan(planPath, planID)
	if err != nil {
		return ApplyResult{}, err
	}
	o.Log.Info("plan checked", "plan_id", planID, "files", len(config))
	store := &StateStore{Client: client, Namespace: o.Namespace, Workspace: o.Workspace}
	unlock, err := store.Lock(ctx, lockWait)
	if err != nil {
		return ApplyResult{}, err
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if uerr := unlock(uctx); uerr != nil {
			err = errors.Join(err, uerr)
		}
	}()
	state, err := store.Read(ctx)
	if err != nil {
		return ApplyResult{}, err
	}
	w, err := prepare(ctx, &o, config, state.Data)
	defer w.remove(o.Log)
	if err != nil {
		return ApplyResult{}, err
	}
	if err := os.WriteFile(filepath.Join(w.dir, planFile), plan, 0o600); err != nil {
		return ApplyResult{}, fmt.Errorf("write saved plan: %w", err)
	}
	changes, _, err := w.show(ctx, false)
	if err != nil {
		return ApplyResult{}, err
	}
	start := time.Now()
	_, text, applyErr := w.tf.run(ctx, false, "apply", "-input=false", "-no-color", "-lock=false", planFile)
	w.timings.Apply = seconds(time.Since(start))
	if werr := writeBack(ctx, store, state, w.dir); werr != nil {
		return ApplyResult{}, errors.Join(applyErr, werr)
	}
	if applyErr != nil {
		return ApplyResult{}, applyErr
	}
	o.Log.Info("terraform apply done", "seconds", w.timings.Apply)
	return ApplyResult{
		Workspace: o.Workspace,
		PlanID:    planID,
		Applied:   true,
		Text:      text,
		Summary:   changes.Summary,
		Timings:   w.timings,
	}, nil
}

// LoadPlan reads the saved plan at path, checks that it hashes to planID and passes the allowlist, and
// returns it with the configuration it embeds.
func LoadPlan(path, planID string) ([]byte, map[string][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("saved plan: %w", err)
	}
	defer f.Close()
	plan, err := io.ReadAll(io.LimitReader(f, MaxPlanSize+1))
	if err != nil {
		return nil, nil, fmt.Errorf("saved plan: %w", err)
	}
	if len(plan) > MaxPlanSize {
		return nil, nil, fmt.Errorf("saved plan: more than %d bytes", MaxPlanSize)
	}
	if got := PlanID(plan); got != planID {
		return nil, nil, fmt.Errorf("%w (its SHA-256 is %s)", ErrPlanMismatch, got)
	}
	config, err := checkedPlanConfig(plan)
	if err != nil {
		return nil, nil, fmt.Errorf("saved plan %s: %w", planID[:12], err)
	}
	return plan, config, nil
}

// checkedPlanConfig checks a saved plan against the allowlist and returns its embedded configuration.
func checkedPlanConfig(plan []byte) (map[string][]byte, error) {
	return tfcheck.PlanConfig(plan, CheckOptions())
}

// writeBack stores the working directory's state file if Terraform changed it.
func writeBack(ctx context.Context, store *StateStore, prev State, dir string) error {
	data, err := os.ReadFile(filepath.Join(dir, stateFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the new state: %w", err)
	}
	if bytes.Equal(data, prev.Data) {
		return nil
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	return store.Write(wctx, prev, data)
}

func seconds(d time.Duration) float64 {
	return float64(d.Round(10*time.Millisecond)) / float64(time.Second)
}
