package cel

import (
	"os"
	"strconv"
	"testing"

	"sigs.k8s.io/yaml"
)

// shippedPolicy is the policy the product ships; its admissionRules are the default isolation rule set
// that these tests exercise.
const shippedPolicy = "../policy/policy.yaml"

// DefaultRules reads the shipped policy's admission rules. It lives in a test file so that the policy
// document stays the only place the rules are written.
func DefaultRules() []Rule {
	data, err := os.ReadFile(shippedPolicy)
	if err != nil {
		panic(err)
	}
	var doc struct {
		Spec struct {
			AdmissionRules []ruleDoc `json:"admissionRules"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		panic(err)
	}
	rules := make([]Rule, len(doc.Spec.AdmissionRules))
	for i, d := range doc.Spec.AdmissionRules {
		rules[i] = Rule{Path: DefaultRulesPath + "[" + itoa(i) + "]", Name: d.Name, Expression: d.Expression, Message: d.Message}
	}
	return rules
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestShippedPolicyHasRules(t *testing.T) {
	if n := len(DefaultRules()); n < 20 {
		t.Fatalf("the shipped policy has %d admission rules, want the isolation set", n)
	}
}
