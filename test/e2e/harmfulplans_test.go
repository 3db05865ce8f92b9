//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/agent-sandbox/agent-sandbox/test/corpus"
)

// harmfulSample are the harmful plans make e2e tries by default (E2E_HARMFUL_ALL=1: all of them; make
// verify always runs all): the incident in both syntaxes, the value known only after apply, the harm hidden
// in a long plan, root by an unset field, RBAC, and the two-person rule.
var harmfulSample = []string{"incident", "incident-json", "unknown-privileged", "hidden-among-many", "root-by-omission",
	"rbac-cluster-admin-binding", "destroy-service"}

// TestE2EHarmfulPlans: workspaces that pass the allowlist but deploy harm (issue 21: a privileged root pod
// with the node's state folder, and the rest of test/corpus/harmful) are refused by the policy's plan rules
// on the live cluster: terraform_plan through a real MCP client returns the rule; the saved plan, made
// outside the sandbox and submitted with a valid approval as the MCP server, is refused by the apply
// sandbox's check container before the credential agent starts, and the demo's Deployment and Service are
// unchanged; the approval screen flags it (pending plandiff's risk render).
func TestE2EHarmfulPlans(t *testing.T) {
	cfg := config(t)
	mirror := env(t, "AGENT_SANDBOX_TF_PROVIDER_MIRROR")
	p := livePolicy(t, cfg)
	key, err := corpus.LoadApprover(cfg.ApproverKey, cfg.PassphraseFile)
	if err != nil {
		t.Fatal(err)
	}
	mcpCfg, err := clientcmd.BuildConfigFromFlags("", cfg.MCPKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	mcpClient, err := kubernetes.NewForConfig(mcpCfg)
	if err != nil {
		t.Fatal(err)
	}
	apply, err := p.Tool("terraform_apply")
	if err != nil {
		t.Fatal(err)
	}
	target := apply.Namespaces[0]
	cases, err := corpus.HarmfulPlans()
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("E2E_HARMFUL_ALL") == "" {
		cases = slices.DeleteFunc(cases, func(c corpus.HarmfulPlan) bool { return !slices.Contains(harmfulSample, c.Name) })
		if len(cases) != len(harmfulSample) {
			t.Fatalf("the sample names %d cases, the corpus has %d of them", len(harmfulSample), len(cases))
		}
	}
	cs := admin(t, cfg.AdminKubeconfig)
	work := t.TempDir()
	keepAuditLogsUnder(t, work)
	r := &corpus.HarmfulRun{
		Env:    &corpus.Env{Policy: p, Approver: key, Identities: &corpus.Identities{Admin: cs, MCP: mcpClient}, Run: "e2e"},
		Binary: cfg.Binary, PolicyFile: cfg.Policy, MCPKubeconfig: cfg.MCPKubeconfig, WorkDir: filepath.Join(work, "cases"),
		TargetNamespace: target,
		Planner: &corpus.LocalPlanner{ProviderMirror: mirror, Kubeconfig: cfg.AdminKubeconfig, Admin: cs,
			Namespace: target, Workspace: "k8s-demo", TempDir: work},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	start := time.Now()
	outcomes, err := r.Run(ctx, cases, 3)
	if err != nil {
		t.Fatal(err)
	}
	lines, verdict, ok := corpus.HarmfulReport(outcomes)
	t.Logf("harmful plans (%s):\n%s\n%s", time.Since(start).Round(time.Second), strings.Join(lines, "\n"), verdict)
	for _, o := range outcomes {
		for _, s := range o.Stages {
			if !s.OK && !s.Pending {
				t.Errorf("%s got through at %s: %s", o.Case.Name, s.Stage, s.Detail)
			}
		}
	}
	if !ok {
		t.Error(verdict)
	}
}
