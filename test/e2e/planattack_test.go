//go:build e2e

package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/agent-sandbox/agent-sandbox/internal/service"
	"github.com/agent-sandbox/agent-sandbox/test/corpus"
	"github.com/agent-sandbox/agent-sandbox/test/demo"
)

// attackWorkspace writes issue 21's attack (corpus.Incident), on the live demo's track, into a new
// workspaces folder.
func attackWorkspace(t *testing.T, track string) string {
	t.Helper()
	inc, err := corpus.Incident()
	if err == nil {
		inc, err = inc.OnTrack(track)
	}
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ws := filepath.Join(dir, "k8s-demo")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range inc.Files {
		if err := os.WriteFile(filepath.Join(ws, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// writePolicy writes the policy document doc twice into a temporary folder: as a policy file, for the MCP
// server and the approver, and as chart values that set it, for helm.
func writePolicy(t *testing.T, doc map[string]any) (policyFile, valuesFile string) {
	t.Helper()
	dir := t.TempDir()
	policyFile, valuesFile = filepath.Join(dir, "policy.yaml"), filepath.Join(dir, "values.yaml")
	for file, v := range map[string]any{policyFile: doc, valuesFile: map[string]any{"policy": doc}} {
		data, err := yaml.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return policyFile, valuesFile
}

// withPolicy upgrades the chart to the policy document doc (also written to a file, returned, for the MCP
// server and the approver) and restarts the webhook; restore rolls back to the revision before.
func withPolicy(t *testing.T, ctx context.Context, cfg demo.Config, doc map[string]any) (file string, restore func()) {
	t.Helper()
	helm, kubectlBin := env(t, "E2E_HELM"), env(t, "E2E_KUBECTL")
	file, valuesFile := writePolicy(t, doc)
	run := func(ctx context.Context, name string, args ...string) error {
		out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
		if err != nil {
			t.Errorf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
		}
		return err
	}
	hist, err := exec.CommandContext(ctx, helm, "--kubeconfig", cfg.AdminKubeconfig, "-n", releaseNS, "history", "agent-sandbox", "--max", "1", "-o", "json").Output()
	if err != nil {
		t.Fatalf("helm history: %v", err)
	}
	prev := jsonRevision(t, string(hist))
	restart := func(ctx context.Context) {
		_ = run(ctx, kubectlBin, "--kubeconfig", cfg.AdminKubeconfig, "-n", releaseNS, "rollout", "restart", "deployment/agent-sandbox-webhook")
		_ = run(ctx, kubectlBin, "--kubeconfig", cfg.AdminKubeconfig, "-n", releaseNS, "rollout", "status", "deployment/agent-sandbox-webhook", "--timeout=120s")
	}
	restored := false
	restore = func() {
		if restored {
			return
		}
		restored = true
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		_ = run(rctx, helm, "--kubeconfig", cfg.AdminKubeconfig, "-n", releaseNS, "rollback", "agent-sandbox", prev, "--wait", "--timeout", "3m")
		restart(rctx)
	}
	t.Cleanup(restore)
	if err := run(ctx, helm, "--kubeconfig", cfg.AdminKubeconfig, "-n", releaseNS, "upgrade", "agent-sandbox", "../../charts/agent-sandbox",
		"--reuse-values", "-f", valuesFile, "--wait", "--timeout", "3m"); err != nil {
		t.FailNow()
	}
	restart(ctx)
	return file, restore
}

// TestE2EPrivilegedPlanAttack replays issue 21's incident end to end through a real MCP client: the attacked
// workspace is refused at plan with the rule's message. With the plan rules loosened (chart and MCP server),
// the plan is saved and terraform_apply waits for approval; `approve` with the shipped policy refuses to
// sign (exit 4), and with the loosened one shows the privileged, root and hostPath lines at the top before it
// signs. Once the shipped rules are restored, the approved apply is refused in the sandbox's check container,
// before any credential. The Deployment is unchanged throughout.
func TestE2EPrivilegedPlanAttack(t *testing.T) {
	cfg := config(t)
	cs := admin(t, cfg.AdminKubeconfig)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	dep := demoDeployment(t, ctx, cs)
	unchanged := func(when string) {
		t.Helper()
		now, err := cs.AppsV1().Deployments("demo-app").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if now.UID != dep.UID || now.Generation != dep.Generation {
			t.Fatalf("%s: the Deployment changed (uid %s -> %s, generation %d -> %d)", when, dep.UID, now.UID, dep.Generation, now.Generation)
		}
	}
	c := cfg
	c.Workspaces = attackWorkspace(t, dep.Spec.Selector.MatchLabels["track"])
	c.DB = filepath.Join(t.TempDir(), "approvals.db")

	// 1. Refused at plan, with the rules' names and the resource.
	client, err := demoClient(ctx, c, "--warm=false")
	if err != nil {
		t.Fatal(err)
	}
	res, err := client.Call(ctx, "terraform_plan", map[string]any{"workspace": "k8s-demo"})
	client.Close()
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.Contains(res.Text, "plan refused by rule") || !strings.Contains(res.Text, "kubernetes_deployment.web") {
		t.Fatalf("the attacked plan was not refused by a plan rule: %s", res.Text)
	}
	inc, _ := corpus.Incident()
	if _, ok := inc.Matches(res.Text); !ok || !strings.Contains(res.Text, "plan-no-privileged") || !strings.Contains(res.Text, "plan-no-host-path") {
		t.Errorf("the refusal does not name the incident's rules (privileged, hostPath): %s", res.Text)
	}
	t.Logf("terraform_plan: %s", res.Text)
	unchanged("after the refused plan")

	// 2. The rules loosened: the plan is saved, the apply waits for a human.
	data, err := os.ReadFile(cfg.Policy)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	doc["spec"].(map[string]any)["planRules"] = []any{}
	loose, restore := withPolicy(t, ctx, cfg, doc)
	c.Policy = loose
	client, err = demoClient(ctx, c, "--warm=false")
	if err != nil {
		t.Fatal(err)
	}
	var plan service.PlanOutput
	res, err = client.Call(ctx, "terraform_plan", map[string]any{"workspace": "k8s-demo"})
	if err == nil && !res.IsError {
		err = res.Decode(&plan)
	}
	if err != nil || res.IsError {
		client.Close()
		t.Fatalf("loosened plan: %v %s", err, res.Text)
	}
	var apply service.ApplyOutput
	res, err = client.Call(ctx, "terraform_apply", map[string]any{"workspace": "k8s-demo", "plan_id": plan.PlanID})
	client.Close()
	if err == nil {
		err = res.Decode(&apply)
	}
	if err != nil || apply.Status != service.StatusApprovalRequired {
		t.Fatalf("apply did not wait for approval: %v %+v", err, apply)
	}

	// 3. The approver, with the shipped policy, is shown the risk and refuses to sign (exit 4) ...
	shipped := c
	shipped.Policy = cfg.Policy
	transcript, err := demo.Approve(ctx, shipped, apply.ApprovalRequest)
	var exit *exec.ExitError
	if err == nil || !errors.As(err, &exit) || exit.ExitCode() != 4 || !strings.Contains(transcript, "plan-no-privileged") {
		t.Fatalf("approve with the shipped rules signed or failed otherwise: %v\n%s", err, transcript)
	}
	// ... and, with the loosened policy, sees the privileged and hostPath lines before anything else, and signs.
	transcript, err = demo.Approve(ctx, c, apply.ApprovalRequest)
	if err != nil {
		t.Fatalf("approve: %v\n%s", err, transcript)
	}
	t.Logf("approval screen:\n%s", transcript)
	checkRiskFirst(t, transcript, "privileged", "host_path", "run_as_user")
	unchanged("after the approval")

	// 4. The shipped rules restored: the approved apply is refused in the sandbox, before any credential.
	restore()
	client, err = demoClient(ctx, shipped, "--warm=false")
	if err != nil {
		t.Fatal(err)
	}
	res, err = client.Call(ctx, "terraform_apply", map[string]any{"workspace": "k8s-demo", "plan_id": plan.PlanID})
	client.Close()
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.Contains(res.Text, "plan-no-privileged") {
		t.Fatalf("the approved apply was not refused in the sandbox by the restored rules: %s", res.Text)
	}
	t.Logf("approved apply, rules restored: %s", res.Text)
	unchanged("after the refused apply")
}

// checkRiskFirst checks that each word appears on a risk line ("!!") of the approval screen, and that the
// risk lines come before the attribute diff.
func checkRiskFirst(t *testing.T, screen string, words ...string) {
	t.Helper()
	lines := strings.Split(screen, "\n")
	// The verified section starts at WHAT THE PLAN DOES; its diff at the counts line that follows the flags.
	verified, firstDiff := -1, -1
	for i, l := range lines {
		switch {
		case verified < 0 && strings.HasPrefix(l, "WHAT THE PLAN DOES"):
			verified = i
		case verified >= 0 && firstDiff < 0 && strings.Contains(l, " to add, ") && strings.Contains(l, " to destroy ("):
			firstDiff = i
		}
	}
	if verified < 0 || firstDiff < 0 {
		t.Fatalf("the approval screen has no verified section with a diff:\n%s", screen)
	}
	for _, w := range words {
		at := -1
		for i, l := range lines[verified:] {
			if strings.HasPrefix(l, "!! RISK ") && strings.Contains(l, w) {
				at = verified + i
				break
			}
		}
		switch {
		case at < 0:
			t.Errorf("no risk line names %s on the approval screen", w)
		case at > firstDiff:
			t.Errorf("the risk line for %s (line %d) comes after the diff (line %d)", w, at, firstDiff)
		}
	}
}
