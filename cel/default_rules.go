package cel

import (
	"fmt"

	"sigs.k8s.io/yaml"
)

// DefaultRulesPath is where a policy document keeps its admission rules; rule paths are
// "spec.admissionRules[i]".
const DefaultRulesPath = "spec.admissionRules"

// ruleDoc is one rule as written in a policy document.
type ruleDoc struct {
	Name       string `json:"name"`
	Expression string `json:"expression"`
	Message    string `json:"message"`
}

// parseRules reads a YAML list of {name, expression, message}, rejecting unknown keys, and
// gives each rule the path "<path>[i]". The policy package decodes whole policies; this is for
// rule lists on their own (tests, tools).
func parseRules(data, path string) ([]Rule, error) {
	var docs []ruleDoc
	if err := yaml.UnmarshalStrict([]byte(data), &docs); err != nil {
		return nil, fmt.Errorf("parse rules: %w", err)
	}
	rules := make([]Rule, len(docs))
	for i, d := range docs {
		rules[i] = Rule{
			Path:       fmt.Sprintf("%s[%d]", path, i),
			Name:       d.Name,
			Expression: d.Expression,
			Message:    d.Message,
		}
	}
	return rules, nil
}
