package runner

import (
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
)

// planFile is the saved plan's name in the working directory.
const planFile = "plan.tfplan"

// lockTimeout is how long plan and apply wait for the state lock held by another run.
const lockTimeout = "-lock-timeout=60s"

// TerraformOptions are the inputs of Plan and Apply.
type TerraformOptions struct {
	// Workspace names the state: Secret tfstate-default-<Workspace> in Namespace.
	Workspace string
	// Source is the folder holding the workspace's files (the ConfigMap volume, /workspace).
	Source string
	// Namespace holds the state, its lock and the saved plans.
	Namespace string
	// Kubeconfig is the per-action kubeconfig, for the backend and the provider alike.
	Kubeconfig string
	// Terraform is the binary ("terraform" on PATH when empty).
	Terraform string
	// Env is the base environment for Terraform (os.Environ() when nil); see TerraformEnv.
	Env []string
	// TempDir is where the working directory is made (os.TempDir() when empty: $TMPDIR or /tmp).
	TempDir string
	// Stderr receives Terraform's output as it runs (io.Discard when nil).
	Stderr io.Writer
	// Log receives progress (nothing when nil).
	Log *slog.Logger
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
	if o.Source == "" {
		errs = append(errs, errors.New("source folder is required"))
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

// prepare makes a fresh working directory, copies the workspace into it, adds the backend override and
// runs `terraform init`. The caller removes the directory.
func prepare(ctx context.Context, o *TerraformOptions) (*workdir, error) {
	sc, err := kubeconfigScrubber(o.Kubeconfig)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(o.TempDir, "agent-sandbox-tf-")
	if err != nil {
		return nil, fmt.Errorf("working directory: %w", err)
	}
	w := &workdir{dir: dir, tf: &terraform{bin: o.Terraform, dir: dir, env: TerraformEnv(o.Env, o.Kubeconfig), stderr: o.Stderr, scrub: sc}}
	files, err := CopyWorkspace(o.Source, dir)
	if err != nil {
		return w, err
	}
	o.Log.Info("workspace copied", "files", files.Copied, "skipped", files.Skipped)
	override, err := RenderBackendOverride(BackendConfig{SecretSuffix: o.Workspace, Namespace: o.Namespace, ConfigPath: o.Kubeconfig})
	if err != nil {
		return w, err
	}
	if err := os.WriteFile(filepath.Join(dir, BackendOverrideFile), override, 0o600); err != nil {
		return w, fmt.Errorf("write backend override: %w", err)
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

// Plan runs `terraform plan` for the workspace, stores the saved plan in a Secret and describes it.
func Plan(ctx context.Context, client kubernetes.Interface, o TerraformOptions) (PlanResult, error) {
	if err := o.complete(); err != nil {
		return PlanResult{}, err
	}
	w, err := prepare(ctx, &o)
	defer w.remove(o.Log)
	if err != nil {
		return PlanResult{}, err
	}
	start := time.Now()
	if _, _, err := w.tf.run(ctx, false, "plan", "-input=false", "-no-color", lockTimeout, "-out="+planFile); err != nil {
		return PlanResult{}, err
	}
	w.timings.Plan = seconds(time.Since(start))
	o.Log.Info("terraform plan done", "seconds", w.timings.Plan)
	plan, err := os.ReadFile(filepath.Join(w.dir, planFile))
	if err != nil {
		return PlanResult{}, fmt.Errorf("read saved plan: %w", err)
	}
	changes, text, err := w.show(ctx, true)
	if err != nil {
		return PlanResult{}, err
	}
	id, err := SavePlan(ctx, client, o.Namespace, o.Workspace, plan)
	if err != nil {
		return PlanResult{}, err
	}
	o.Log.Info("plan saved", "secret", PlanSecretName(id), "plan_id", id, "bytes", len(plan))
	return PlanResult{
		Workspace: o.Workspace,
		PlanID:    id,
		Summary:   changes.Summary,
		Changes:   changes.Changes,
		Text:      text,
		NoChanges: changes.NoChanges,
		Timings:   w.timings,
	}, nil
}

// Apply applies exactly the saved plan whose SHA-256 is planID, then deletes it. The plan's bytes are
// checked against planID before Terraform runs; Terraform's own check refuses a stale plan (ErrStalePlan).
func Apply(ctx context.Context, client kubernetes.Interface, o TerraformOptions, planID string) (ApplyResult, error) {
	if err := ValidatePlanID(planID); err != nil {
		return ApplyResult{}, err
	}
	if err := o.complete(); err != nil {
		return ApplyResult{}, err
	}
	plan, err := LoadPlan(ctx, client, o.Namespace, o.Workspace, planID)
	if err != nil {
		return ApplyResult{}, err
	}
	o.Log.Info("plan loaded", "secret", PlanSecretName(planID), "plan_id", planID)
	w, err := prepare(ctx, &o)
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
	_, text, err := w.tf.run(ctx, false, "apply", "-input=false", "-no-color", lockTimeout, planFile)
	if err != nil {
		return ApplyResult{}, err
	}
	w.timings.Apply = seconds(time.Since(start))
	o.Log.Info("terraform apply done", "seconds", w.timings.Apply)
	if err := DeletePlan(ctx, client, o.Namespace, planID); err != nil {
		// Terraform would refuse the plan again anyway (the state has moved on); keep the result.
		o.Log.Warn("applied plan not deleted", "err", err)
	}
	return ApplyResult{
		Workspace: o.Workspace,
		PlanID:    planID,
		Applied:   true,
		Text:      text,
		Summary:   changes.Summary,
		Timings:   w.timings,
	}, nil
}

func seconds(d time.Duration) float64 {
	return float64(d.Round(10*time.Millisecond)) / float64(time.Second)
}
