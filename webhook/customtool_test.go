package webhook

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/policy/policytest"
)

// customToolFile declares a tool in YAML alone.
const customToolFile = "../examples/policy/custom-tool.yaml"

// withCustomTool is the shipped policy with examples/policy/custom-tool.yaml's scopes and tools added, as a
// platform team would add them: in the policy file, nothing else.
func withCustomTool(t testing.TB) *policy.Compiled {
	t.Helper()
	doc, _ := policytest.Spliced(t, shippedPolicy, customToolFile)
	p, err := policy.Load(policytest.YAML(t, doc))
	if err != nil {
		t.Fatalf("the policy with the custom tool: %v", err)
	}
	return p
}

// TestCustomToolIsEnforced: a tool declared only in the policy file renders a Job the webhook admits, with
// its Pod, and a twin of that Job running another argv, or in another namespace, is refused.
func TestCustomToolIsEnforced(t *testing.T) {
	f := newFixture(t)
	f.p = withCustomTool(t)
	f.c.SetPolicy(f.p)

	j := f.job(t, "k8s_list_services", map[string]any{"namespace": "demo-app"}, "")
	if got := j.Spec.Template.Spec.Containers[0].Command; len(got) != 5 || got[3] != "--namespace=demo-app" || got[4] != "--kind=service" {
		t.Fatalf("rendered argv %v", got)
	}
	d, err := f.checkJob(t, j, Request{})
	if err != nil {
		t.Fatalf("the custom tool's Job denied: %v", err)
	}
	if d.Tool != "k8s_list_services" {
		t.Errorf("decision for %q", d.Tool)
	}

	twin := j.DeepCopy()
	twin.Spec.Template.Spec.Containers[0].Command[4] = "--kind=configmap"
	if _, err := f.checkJob(t, twin, Request{}); ruleOf(err) != "exact-command" {
		t.Errorf("a twin that describes ConfigMaps instead: %v, want exact-command", err)
	}

	// The same Job is unknown to a webhook running the shipped policy alone: default deny.
	plain := newFixture(t)
	if _, err := plain.checkJob(t, j, Request{}); err == nil {
		t.Error("the shipped policy's webhook admitted a tool it does not declare")
	}
}

// The sidecar's postStart gate: the project's runners wait for the credential themselves and go without it;
// any other program keeps it, so it never starts before its kubeconfig exists.
func TestInjectCredentialGate(t *testing.T) {
	tests := []struct {
		argv []string
		gate bool
	}{
		{[]string{"/agent-sandbox", "run", "pod-status", "--namespace=demo-app"}, false},
		{[]string{"/agent-sandbox", "run", "terraform-plan", "--workspace=k8s-demo"}, false},
		{[]string{"/agent-sandbox", "run", "warm", "--tool=x"}, true},
		{[]string{"/agent-sandbox", "run", "--help"}, true},
		{[]string{"/agent-sandbox", "run"}, true},
		{[]string{"/agent-sandbox", "cred-agent", "ready"}, true},
		{[]string{"/usr/bin/kubectl", "get", "pods"}, true},
		{[]string{"/bin/sh", "-c", "/agent-sandbox run pod-status"}, true},
	}
	p := loadPolicy(t)
	tl, err := p.Tool("k8s_get_pod_status")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		inv, err := tl.Invoke(map[string]any{"namespace": "demo-app"})
		if err != nil {
			t.Fatal(err)
		}
		inv.Argv = tt.argv
		var meta metav1.ObjectMeta
		spec := corev1.PodSpec{Containers: []corev1.Container{{Name: contract.ToolContainer, Command: tt.argv}}}
		Inject(&meta, &spec, p, inv)
		agent := spec.InitContainers[len(spec.InitContainers)-1]
		if agent.Name != contract.CredentialAgentContainer {
			t.Fatalf("last init container %q", agent.Name)
		}
		gate := agent.Lifecycle != nil && agent.Lifecycle.PostStart != nil && agent.Lifecycle.PostStart.Exec != nil &&
			len(agent.Lifecycle.PostStart.Exec.Command) > 2 && agent.Lifecycle.PostStart.Exec.Command[2] == "ready"
		if gate != tt.gate {
			t.Errorf("argv %q: postStart gate %v, want %v (lifecycle %+v)", tt.argv, gate, tt.gate, agent.Lifecycle)
		}
	}
}
