package cel

import (
	"fmt"
	"os"
	"strconv"
	"testing"

	"sigs.k8s.io/yaml"
)

// shippedPolicy is the policy the product ships; its admissionRules are the default isolation rule set
// that these tests exercise.
const shippedPolicy = "../policy/policy.yaml"

// DefaultRulesPath is where a policy document keeps its admission rules; rule paths are
// "spec.admissionRules[i]".
const DefaultRulesPath = "spec.admissionRules"

// ruleDoc is one rule as written in a policy document.
type ruleDoc struct {
	Name       string `json:"name"`
	Expression string `json:"expression"`
	Message    string `json:"message"`
}

// parseRules reads a YAML list of {name, expression, message}, rejecting unknown keys, and gives each
// rule the path "<path>[i]". (The policy package decodes whole policies; this is for rule lists in tests.)
func parseRules(data, path string) ([]Rule, error) {
	var docs []ruleDoc
	if err := yaml.UnmarshalStrict([]byte(data), &docs); err != nil {
		return nil, fmt.Errorf("parse rules: %w", err)
	}
	rules := make([]Rule, len(docs))
	for i, d := range docs {
		rules[i] = Rule{Path: fmt.Sprintf("%s[%d]", path, i), Name: d.Name, Expression: d.Expression, Message: d.Message}
	}
	return rules, nil
}

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
