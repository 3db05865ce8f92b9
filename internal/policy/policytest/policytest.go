// Package policytest builds the policies tests need from the shipped files, as a platform team would
// build them: by adding to the policy file, nothing else.
package policytest

import (
	"os"
	"testing"

	"sigs.k8s.io/yaml"
)

// Spliced reads the policy file base and the file extra, which declares scopes and tools (say,
// examples/policy/custom-tool.yaml), and returns base's document with extra's scopes and tools appended
// to its spec, and extra's document.
func Spliced(t testing.TB, base, extra string) (doc, added map[string]any) {
	t.Helper()
	for path, into := range map[string]*map[string]any{base: &doc, extra: &added} {
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
		spec[k] = append(spec[k].([]any), added[k].([]any)...)
	}
	return doc, added
}

// YAML is doc as a policy file.
func YAML(t testing.TB, doc map[string]any) []byte {
	t.Helper()
	data, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
