package toolrun

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// ShowOptions are the inputs of ShowPlan.
type ShowOptions struct {
	// Terraform is the binary ("terraform" on PATH when empty).
	Terraform string
	// ProviderMirror is a filesystem mirror holding the kubernetes provider (the layout
	// registry.terraform.io/hashicorp/kubernetes/<version>/<os_arch>/...): terraform init installs it
	// from there, and from nowhere else.
	ProviderMirror string
	// TempDir is where the working directory is made.
	TempDir string
	// Stderr receives Terraform's output (io.Discard when nil).
	Stderr io.Writer
}

// ShowPlan describes a saved plan with Terraform itself, on this machine, without any cluster: it checks
// the plan against the allowlist, lays out the configuration the plan embeds, initialises it with the
// provider from the mirror and runs `terraform show` (JSON and text) on the plan. It is what the approver's
// own software computes from the bound artifact, instead of trusting a description someone else wrote.
func ShowPlan(ctx context.Context, plan []byte, o ShowOptions) (PlanChanges, string, error) {
	config, err := planConfig(plan)
	if err != nil {
		return PlanChanges{}, "", err
	}
	if o.ProviderMirror == "" {
		return PlanChanges{}, "", fmt.Errorf("no provider mirror: terraform needs the kubernetes provider %s to read the plan", ProviderVersion)
	}
	if o.Stderr == nil {
		o.Stderr = io.Discard
	}
	dir, err := os.MkdirTemp(o.TempDir, "agent-sandbox-show-")
	if err != nil {
		return PlanChanges{}, "", err
	}
	defer os.RemoveAll(dir)
	cli := filepath.Join(dir, ".terraformrc")
	mirror, err := filepath.Abs(o.ProviderMirror)
	if err != nil {
		return PlanChanges{}, "", err
	}
	rc := fmt.Sprintf("provider_installation {\n  filesystem_mirror {\n    path    = %q\n    include = [\"registry.terraform.io/hashicorp/kubernetes\"]\n  }\n}\n", mirror)
	if err := os.WriteFile(cli, []byte(rc), 0o600); err != nil {
		return PlanChanges{}, "", err
	}
	work := filepath.Join(dir, "work")
	if err := os.Mkdir(work, 0o700); err != nil {
		return PlanChanges{}, "", err
	}
	if err := writeFiles(work, config); err != nil {
		return PlanChanges{}, "", err
	}
	if err := os.WriteFile(filepath.Join(work, planFile), plan, 0o600); err != nil {
		return PlanChanges{}, "", err
	}
	bin := o.Terraform
	if bin == "" {
		bin = "terraform"
	}
	// No credential at all: showing a plan needs none.
	env := append(TerraformEnv(os.Environ(), filepath.Join(dir, "no-kubeconfig")), "TF_CLI_CONFIG_FILE="+cli)
	w := &workdir{dir: work, tf: &terraform{bin: bin, dir: work, env: env, stderr: o.Stderr}}
	if _, _, err := w.tf.run(ctx, false, "init", "-input=false", "-no-color", "-backend=false"); err != nil {
		return PlanChanges{}, "", err
	}
	return w.show(ctx, true)
}

func planConfig(plan []byte) (map[string][]byte, error) {
	if len(plan) > MaxPlanSize {
		return nil, fmt.Errorf("saved plan: more than %d bytes", MaxPlanSize)
	}
	return checkedPlanConfig(plan)
}

// DescribePlan is the one-paragraph description of a plan that an approval request carries: its ID,
// counts and the action on each resource. The MCP server writes it into the request; `approve` computes it
// again from the saved plan and refuses when the two differ.
func DescribePlan(planID string, s PlanSummary, changes []ResourceChange) string {
	id := planID
	if len(id) > 12 {
		id = id[:12]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "plan %s: %d to add, %d to change, %d to destroy, %d to replace", id, s.Add, s.Change, s.Destroy, s.Replace)
	for _, ch := range changes {
		fmt.Fprintf(&b, "\n  %v %s", ch.Actions, ch.Address)
	}
	return b.String()
}
