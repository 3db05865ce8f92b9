package webhook

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
)

// TestVaultNamespaceIsInjected: a policy naming a Vault Enterprise / HCP namespace gives the credential
// agent --vault-namespace, the Job carrying it is admitted, and a Job whose agent would log in to another
// namespace (here the root one) is refused by the exactness check, so a caller cannot move the agent.
func TestVaultNamespaceIsInjected(t *testing.T) {
	root := newFixture(t)
	data, err := os.ReadFile(shippedPolicy)
	if err != nil {
		t.Fatal(err)
	}
	const anchor = "      vaultAudience: vault\n"
	if !strings.Contains(string(data), anchor) {
		t.Fatalf("the shipped policy has no %q line to extend", anchor)
	}
	p, err := policy.Load([]byte(strings.Replace(string(data), anchor, anchor+"      vaultNamespace: admin/team-a\n", 1)))
	if err != nil {
		t.Fatal(err)
	}
	ns := newFixture(t)
	ns.p = p
	ns.c.SetPolicy(p)

	agentArgs := func(f *fixture) []string {
		j := f.job(t, "k8s_get_pod_status", podParams(), "")
		for _, c := range j.Spec.Template.Spec.InitContainers {
			if c.Name == contract.CredentialAgentContainer {
				return c.Command
			}
		}
		t.Fatal("no credential agent injected")
		return nil
	}
	if got := agentArgs(ns); !slices.Contains(got, "--vault-namespace=admin/team-a") {
		t.Errorf("agent args %q lack --vault-namespace=admin/team-a", got)
	}
	if got := agentArgs(root); slices.ContainsFunc(got, func(a string) bool { return strings.HasPrefix(a, "--vault-namespace") }) {
		t.Errorf("a policy without vaultNamespace renders %q", got)
	}
	if _, err := ns.checkJob(t, ns.job(t, "k8s_get_pod_status", podParams(), ""), Request{}); err != nil {
		t.Errorf("the Job rendered for the namespaced policy is refused: %v", err)
	}
	if _, err := ns.checkJob(t, root.job(t, "k8s_get_pod_status", podParams(), ""), Request{}); err == nil {
		t.Error("a Job whose agent logs in to the root namespace is admitted under a policy that names admin/team-a")
	}
}
