package policy

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

var gkePlacement = Placement{
	NodeSelector: map[string]string{"sandbox.gke.io/runtime": "gvisor"},
	Tolerations:  []corev1.Toleration{{Key: "sandbox.gke.io/runtime", Operator: corev1.TolerationOpEqual, Value: "gvisor", Effect: corev1.TaintEffectNoSchedule}},
}

// TestWithPlacementSetsOnlyThePlacement: the shipped policy with GKE's placement loads with exactly that
// placement and is otherwise the same policy (tools, rules, settings); its comments are kept.
func TestWithPlacementSetsOnlyThePlacement(t *testing.T) {
	data, err := os.ReadFile("../../policy/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	base, err := Load(data)
	if err != nil {
		t.Fatal(err)
	}
	out, err := WithPlacement(data, gkePlacement)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Load(out)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Spec.Sandbox.NodeSelector, gkePlacement.NodeSelector) || !reflect.DeepEqual(got.Spec.Sandbox.Tolerations, gkePlacement.Tolerations) {
		t.Fatalf("placement = %v %v, want %v %v", got.Spec.Sandbox.NodeSelector, got.Spec.Sandbox.Tolerations, gkePlacement.NodeSelector, gkePlacement.Tolerations)
	}
	if s := got.Settings(); !reflect.DeepEqual(s["nodeSelector"], map[string]any{"sandbox.gke.io/runtime": "gvisor"}) {
		t.Errorf("the admission rules' settings do not carry the node selector: %v", s["nodeSelector"])
	}
	// Everything but the placement is the shipped policy.
	got.Spec.Sandbox.NodeSelector, got.Spec.Sandbox.Tolerations = nil, nil
	if a, b := mustJSON(t, got.Policy), mustJSON(t, base.Policy); a != b {
		t.Error("WithPlacement changed more than spec.sandbox.nodeSelector and spec.sandbox.tolerations")
	}
	if !strings.Contains(string(out), "# Default-deny: a tool that is not listed here does not exist") {
		t.Error("the policy's comments were lost")
	}

	// Setting it twice replaces rather than adds; an empty placement removes it again.
	again, err := WithPlacement(out, gkePlacement)
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != string(out) {
		t.Errorf("a second WithPlacement changed the document:\n%s", again)
	}
	cleared, err := WithPlacement(out, Placement{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := Load(cleared)
	if err != nil {
		t.Fatal(err)
	}
	if c.Spec.Sandbox.NodeSelector != nil || c.Spec.Sandbox.Tolerations != nil {
		t.Errorf("an empty placement left %v %v", c.Spec.Sandbox.NodeSelector, c.Spec.Sandbox.Tolerations)
	}
}

func TestWithPlacementRefusesWhatDoesNotLoad(t *testing.T) {
	for name, doc := range map[string]string{
		"not a policy":  "a: 1\n",
		"no sandbox":    "apiVersion: agent-sandbox.dev/v1alpha1\nkind: SandboxPolicy\nspec: {}\n",
		"two documents": "a: 1\n---\nb: 2\n",
		"not YAML":      "spec: [\n",
	} {
		if _, err := WithPlacement([]byte(doc), gkePlacement); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
