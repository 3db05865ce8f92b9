package policy

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
)

// TestClaimSpec: a warm Pod's own rendering of a claim's parameters is the policy's, and refuses what the
// policy refuses.
func TestClaimSpec(t *testing.T) {
	c := loadDefault(t)
	tool, err := c.Tool("k8s_get_pod_status")
	if err != nil {
		t.Fatal(err)
	}
	spec, err := ParseClaimSpec(tool.ClaimSpec().String())
	if err != nil {
		t.Fatal(err)
	}
	for _, params := range []string{`{"namespace":"demo-app"}`, `{"label_selector":"app=web","namespace":"demo-app"}`} {
		raw, err := decodeJSONParams(params)
		if err != nil {
			t.Fatal(err)
		}
		inv, err := tool.Invoke(raw)
		if err != nil {
			t.Fatal(err)
		}
		argv, ns, err := spec.Render([]byte(params))
		if err != nil || !slices.Equal(argv, inv.Argv) || ns != inv.TargetNamespace {
			t.Errorf("%s: rendered %q %q (%v), the policy %q %q", params, argv, ns, err, inv.Argv, inv.TargetNamespace)
		}
	}
	for _, bad := range []string{`{"namespace":"kube-system"}`, `{"namespace":"demo-app; id"}`, `{"namespace":"demo-app","x":1}`, `{}`, `[]`, `{"namespace":"demo-app"} {}`} {
		if argv, _, err := spec.Render([]byte(bad)); err == nil {
			t.Errorf("%s rendered %q", bad, argv)
		}
	}
	for _, bad := range []string{"", "{}", `{"tool":"x","command":["a"],"namespaces":["n"],"extra":1}`} {
		if _, err := ParseClaimSpec(bad); err == nil {
			t.Errorf("claim spec %q parsed", bad)
		}
	}
	if strings.Contains(tool.ClaimSpec().String(), tool.Parameters[0].Description) {
		t.Error("the claim spec carries the parameters' descriptions")
	}
}

// TestWarmToolReservedPlaceholder: a warm tool's command may name parameters only — its warm Pod renders
// the claim's argv from them alone.
func TestWarmToolReservedPlaceholder(t *testing.T) {
	raw, err := os.ReadFile(defaultPolicyPath)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(raw), `"--selector={{label_selector}}"]`, `"--selector={{label_selector}}", "--rules={{plan_rules}}"]`, 1)
	if s == string(raw) {
		t.Fatal("the shipped policy's warm tool command changed; update the test")
	}
	if _, err := Load([]byte(s)); err == nil || !strings.Contains(err.Error(), "plan_rules") {
		t.Fatalf("a warm tool using {{plan_rules}} loaded: %v", err)
	}
}

func decodeJSONParams(s string) (map[string]any, error) {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var m map[string]any
	return m, dec.Decode(&m)
}
