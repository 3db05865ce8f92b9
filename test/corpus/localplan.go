package corpus

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"k8s.io/client-go/kubernetes"

	"github.com/agent-sandbox/agent-sandbox/internal/toolrun"
)

// LocalPlanner makes saved plans outside any sandbox: real Terraform on this machine with the admin
// kubeconfig and the provider mirror, against the workspace's live state, the way the sandbox's runner lays
// out its working directory (the files, the state file, Terraform's implicit local backend) so that the
// apply sandbox's check takes the plan for one of its own. It is deliberately not the runner's own Plan
// (toolrun.Plan, `agent-sandbox run terraform-plan`): that evaluates the plan rules, and the corpus needs
// the harmful plan itself — what an attacker who got a plan made anywhere would bring to the apply.
type LocalPlanner struct {
	// Terraform is the binary ("terraform" on PATH when empty); it must be the image's version (1.11.4),
	// or the apply's terraform refuses the plan.
	Terraform string
	// ProviderMirror is a filesystem mirror of the kubernetes provider (see toolrun.ShowOptions).
	ProviderMirror string
	// Kubeconfig is an admin kubeconfig: the provider reads the live objects with it.
	Kubeconfig string
	// Admin reads the workspace's state Secret.
	Admin kubernetes.Interface
	// Namespace and Workspace name the state (Secret tfstate-default-<Workspace> in Namespace).
	Namespace, Workspace string
	// TempDir is where working directories are made (os.TempDir() when empty).
	TempDir string
}

// Plan plans files against the live state and returns the saved plan and `terraform show -json` of it.
func (p *LocalPlanner) Plan(ctx context.Context, files map[string][]byte) (plan, showJSON []byte, err error) {
	if p.ProviderMirror == "" || p.Kubeconfig == "" || p.Admin == nil {
		return nil, nil, errors.New("local plan: a provider mirror, an admin kubeconfig and an admin client are needed")
	}
	bin := p.Terraform
	if bin == "" {
		bin = "terraform"
	}
	if bin, err = exec.LookPath(bin); err != nil {
		return nil, nil, fmt.Errorf("local plan: %w", err)
	}
	kubeconfig, err := filepath.Abs(p.Kubeconfig)
	if err != nil {
		return nil, nil, err
	}
	state, err := (&toolrun.StateStore{Client: p.Admin, Namespace: p.Namespace, Workspace: p.Workspace}).Read(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("local plan: %w", err)
	}
	tmp, err := os.MkdirTemp(p.TempDir, "agent-sandbox-harmful-")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(tmp)
	w, err := newLocalWorkdir(tmp, p.ProviderMirror, files)
	if err != nil {
		return nil, nil, err
	}
	if state.Data != nil {
		if err := os.WriteFile(filepath.Join(w.dir, "terraform.tfstate"), state.Data, 0o600); err != nil {
			return nil, nil, err
		}
	}
	tf := w.terraform(bin, kubeconfig)
	if _, err := tf(ctx, "init", "-input=false", "-no-color"); err != nil {
		return nil, nil, err
	}
	if _, err := tf(ctx, "plan", "-input=false", "-no-color", "-lock=false", "-out=plan.tfplan"); err != nil {
		return nil, nil, err
	}
	if showJSON, err = tf(ctx, "show", "-json", "plan.tfplan"); err != nil {
		return nil, nil, err
	}
	if plan, err = os.ReadFile(filepath.Join(w.dir, "plan.tfplan")); err != nil {
		return nil, nil, err
	}
	return plan, showJSON, nil
}

// localWorkdir is a Terraform working directory with a CLI configuration that installs the kubernetes
// provider from a filesystem mirror, and from nowhere else.
type localWorkdir struct {
	root, dir, cliConfig string
}

func newLocalWorkdir(root, mirror string, files map[string][]byte) (*localWorkdir, error) {
	abs, err := filepath.Abs(mirror)
	if err != nil {
		return nil, err
	}
	w := &localWorkdir{root: root, dir: filepath.Join(root, "work"), cliConfig: filepath.Join(root, ".terraformrc")}
	rc := fmt.Sprintf("provider_installation {\n  filesystem_mirror {\n    path    = %q\n    include = [\"registry.terraform.io/hashicorp/kubernetes\"]\n  }\n}\n", abs)
	if err := os.WriteFile(w.cliConfig, []byte(rc), 0o600); err != nil {
		return nil, err
	}
	if err := os.Mkdir(w.dir, 0o700); err != nil {
		return nil, err
	}
	for name, data := range files {
		if name != filepath.Base(name) || strings.HasPrefix(name, ".") && name != ".terraform.lock.hcl" {
			return nil, fmt.Errorf("workspace file name %q", name)
		}
		if err := os.WriteFile(filepath.Join(w.dir, name), data, 0o600); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// terraform returns a function that runs the binary in the working directory with the runner's
// environment rules (toolrun.TerraformEnv: no TF_* or KUBE_* from outside, KUBECONFIG = kubeconfig) and
// returns its standard output; a failure carries the last lines of its standard error.
func (w *localWorkdir) terraform(bin, kubeconfig string) func(ctx context.Context, args ...string) ([]byte, error) {
	env := append(toolrun.TerraformEnv(os.Environ(), kubeconfig), "TF_CLI_CONFIG_FILE="+w.cliConfig)
	return func(ctx context.Context, args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Dir, cmd.Env = w.dir, env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("terraform %s: %w: %s", args[0], err, lastLines(stderr.String(), 6))
		}
		return stdout.Bytes(), nil
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
