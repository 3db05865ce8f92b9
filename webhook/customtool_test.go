package webhook

import (
	"os"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/agent-sandbox/agent-sandbox/internal/policy"
)

// customToolFile declares a tool in YAML alone.
const customToolFile = "../examples/policy/custom-tool.yaml"

// withCustomTool is the shipped policy with examples/policy/custom-tool.yaml's scopes and tools added, as a
// platform team would add them: in the policy file, nothing else.
func withCustomTool(t testing.TB) *policy.Compiled {
	t.Helper()
	var doc, extra map[string]any
	for path, into := range map[string]*map[string]any{shippedPolicy: &doc, customToolFile: &extra} {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(data, into); err != nil {
			t.Fatal(err)
		}
	}
	spec := doc["spec"].(map[string]any)
	for _, k := range []string{"scopes", "tools"} {
		spec[k] = append(spec[k].([]any), extra[k].([]any)...)
	}
	data, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Load(data)
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
