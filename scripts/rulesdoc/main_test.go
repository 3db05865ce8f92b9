package main

import (
	"strings"
	"testing"
)

// TestRulesDocUpToDate: the committed docs/rules.md is exactly what the registry and the shipped policy
// give. After adding a rule or changing a policy rule's message, run make rules-docs.
func TestRulesDocUpToDate(t *testing.T) {
	if err := run("../..", true); err != nil {
		t.Fatal(err)
	}
}

func TestGenerateRows(t *testing.T) {
	out, err := generate("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| `pod-status` | 3. Exactness |",
		"| `unknown-tool` | 1. Default deny |",
		"| `rate_limited` | 8. Audit |",
		"| `plan-no-privileged` | 13. The policy judges what a plan does |",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("docs/rules.md lacks %q", want)
		}
	}
}
