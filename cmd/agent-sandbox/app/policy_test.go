package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPolicyCheck(t *testing.T) {
	good := "../../../policy/policy.yaml"
	code, out, errOut := runCLI(t, "policy", "check", good)
	if code != 0 || !strings.Contains(out, "OK") {
		t.Fatalf("the shipped policy: exit %d\n%s%s", code, out, errOut)
	}

	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	// Break the fourth admission rule's CEL and add an unknown field: both are reported with their paths.
	src := string(data)
	i := strings.Index(src, "  admissionRules:")
	for n := 0; n < 4; n++ {
		i += strings.Index(src[i:], "    expression: |-\n") + len("    expression: |-\n")
	}
	src = src[:i] + "      podSpec.((\n" + src[i:]
	src = strings.Replace(src, "    tier: read\n", "    tier: read\n    tiers: [read]\n", 1)
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = runCLI(t, "policy", "check", bad)
	if code != 1 {
		t.Fatalf("exit %d for a bad policy, want 1", code)
	}
	for _, want := range []string{`unknown field "spec.tools[0].tiers"`} {
		if !strings.Contains(errOut, want) {
			t.Errorf("output lacks %q:\n%s", want, errOut)
		}
	}
	// The decoder stops at the unknown field; with it fixed the CEL error is reported with its path.
	if err := os.WriteFile(bad, []byte(strings.Replace(src, "    tiers: [read]\n", "", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = runCLI(t, "policy", "check", bad)
	if code != 1 || !strings.Contains(errOut, "spec.admissionRules[3].expression:") {
		t.Fatalf("exit %d, output:\n%s", code, errOut)
	}
	if strings.Contains(errOut, "goroutine") || strings.Contains(errOut, "panic") {
		t.Errorf("not a clean error:\n%s", errOut)
	}
}
