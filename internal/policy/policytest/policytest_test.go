package policytest

import (
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/policy"
)

// TestSpliced: the shipped policy with the example custom tool loads, and has the shipped tools and the
// custom one, whose scope came along.
func TestSpliced(t *testing.T) {
	const base, extra = "../../../policy/policy.yaml", "../../../examples/policy/custom-tool.yaml"
	shipped, err := policy.LoadFile(base)
	if err != nil {
		t.Fatal(err)
	}
	doc, added := Spliced(t, base, extra)
	p, err := policy.Load(YAML(t, doc))
	if err != nil {
		t.Fatalf("the spliced policy: %v", err)
	}
	for _, tl := range shipped.Spec.Tools {
		if _, err := p.Tool(tl.Name); err != nil {
			t.Errorf("shipped tool %s: %v", tl.Name, err)
		}
	}
	tools := added["tools"].([]any)
	if len(tools) == 0 {
		t.Fatal("the example declares no tool")
	}
	for _, x := range tools {
		name := x.(map[string]any)["name"].(string)
		if _, err := p.Tool(name); err != nil {
			t.Errorf("custom tool %s: %v", name, err)
		}
		if _, err := shipped.Tool(name); err == nil {
			t.Errorf("%s is shipped already: the test proves nothing", name)
		}
	}
}
