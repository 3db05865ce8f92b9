package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/cli"
)

func TestPolicyCheck(t *testing.T) {
	good := "../../../../policy/policy.yaml"
	code, out, errOut := testMain.Capture("policy", "check", good)
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
	code, _, errOut = testMain.Capture("policy", "check", bad)
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
	code, _, errOut = testMain.Capture("policy", "check", bad)
	if code != 1 || !strings.Contains(errOut, "spec.admissionRules[3].expression:") {
		t.Fatalf("exit %d, output:\n%s", code, errOut)
	}
	if strings.Contains(errOut, "goroutine") || strings.Contains(errOut, "panic") {
		t.Errorf("not a clean error:\n%s", errOut)
	}
}

// TestPolicyGet: a field of the shipped policy prints as deploy.sh reads it (a string bare, anything else as
// JSON, defaults applied); a bad path, a field not in the policy, a bad policy and a missing file fail with
// nothing on stdout.
func TestPolicyGet(t *testing.T) {
	good := "../../../../policy/policy.yaml"
	for field, want := range map[string]string{
		"spec.sandbox.namespace": "agent-sandbox\n",
		"spec.clusterID":         "agent-sandbox-local\n",
		"spec.sandbox.runAsUser": "65532\n",
		"spec.tools[0].name":     "k8s_get_pod_status\n",
	} {
		code, out, errOut := testMain.Capture("policy", "get", field, "--policy", good)
		if code != 0 || out != want {
			t.Errorf("%s: exit %d, %q (want %q) %s", field, code, out, want, errOut)
		}
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("apiVersion: agent-sandbox.dev/v1alpha1\nkind: SandboxPolicy\nspec: {sandboxx: {}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"spec.nope"}, 1, "spec.nope: no such field in the policy"},
		{[]string{"spec.tools[999].name"}, 1, "spec.tools[999]: the list has"},
		{[]string{"spec.clusterID.x"}, 1, "spec.clusterID.x: not an object"},
		{[]string{"spec..x"}, cli.ExitUsage, "an empty name"},
		{[]string{"spec.tools[x]"}, cli.ExitUsage, "an index is [N]"},
		{[]string{"spec.tools[0]x"}, cli.ExitUsage, "an index is [N]"},
		{[]string{"spec.clusterID", "--policy", ""}, cli.ExitUsage, "--policy is required"},
		{[]string{"spec.clusterID", "--policy", bad}, 1, `unknown field "spec.sandboxx"`},
		{[]string{"spec.clusterID", "--policy", bad + ".missing"}, cli.ExitNotFound, "no such file"},
	} {
		args := append([]string{"policy", "get"}, c.args...)
		if len(c.args) == 1 {
			args = append(args, "--policy", good)
		}
		code, out, errOut := testMain.Capture(args...)
		if code != c.code || out != "" || !strings.Contains(errOut, c.want) || strings.Contains(errOut, "goroutine") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d and %q", c.args, code, out, errOut, c.code, c.want)
		}
	}
}

// TestPolicyPlace: the shipped policy placed as make up PROFILE=gke places it reads back, through policy get,
// with GKE's node selector and the toleration of its taint; bad flags fail before anything is written.
func TestPolicyPlace(t *testing.T) {
	good := "../../../../policy/policy.yaml"
	out := filepath.Join(t.TempDir(), "gke.yaml")
	code, stdout, errOut := testMain.Capture("policy", "place", "--policy", good, "--node-selector", "sandbox.gke.io/runtime=gvisor",
		"--toleration", "sandbox.gke.io/runtime=gvisor:NoSchedule", "--toleration", "example.com/dedicated:NoExecute", "--out", out)
	if code != 0 || stdout != "" {
		t.Fatalf("place: exit %d\n%s%s", code, stdout, errOut)
	}
	for field, want := range map[string]string{
		"spec.sandbox.nodeSelector": `{
  "sandbox.gke.io/runtime": "gvisor"
}`,
		"spec.sandbox.tolerations": `[
  {
    "effect": "NoSchedule",
    "key": "sandbox.gke.io/runtime",
    "operator": "Equal",
    "value": "gvisor"
  },
  {
    "effect": "NoExecute",
    "key": "example.com/dedicated",
    "operator": "Exists"
  }
]`,
		"spec.sandbox.namespace": "agent-sandbox",
	} {
		code, got, errOut := testMain.Capture("policy", "get", field, "--policy", out)
		if code != 0 || strings.TrimSpace(got) != want {
			t.Errorf("%s of the placed policy: exit %d, got\n%s\nwant\n%s\n%s", field, code, got, want, errOut)
		}
	}
	// Without flags the placement is removed again.
	cleared := filepath.Join(t.TempDir(), "cleared.yaml")
	if code, _, errOut := testMain.Capture("policy", "place", "--policy", out, "--out", cleared); code != 0 {
		t.Fatalf("clear: exit %d\n%s", code, errOut)
	}
	if code, _, _ := testMain.Capture("policy", "get", "spec.sandbox.nodeSelector", "--policy", cleared); code != 1 {
		t.Errorf("the cleared policy still has a node selector (exit %d)", code)
	}

	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--node-selector", "sandbox.gke.io/runtime"}, cli.ExitUsage, "write it as KEY=VALUE"},
		{[]string{"--node-selector", "a=b", "--node-selector", "a=c"}, cli.ExitUsage, "a is given twice"},
		{[]string{"--toleration", "sandbox.gke.io/runtime=gvisor"}, cli.ExitUsage, "no effect"},
		{[]string{"--toleration", "k=v:Sometimes"}, cli.ExitUsage, "the effect is NoSchedule"},
		{[]string{"--toleration", "=v:NoSchedule"}, cli.ExitUsage, "no key"},
		{[]string{"--policy", ""}, cli.ExitUsage, "--policy is required"},
		{[]string{"--policy", good + ".missing"}, cli.ExitNotFound, "no such file"},
	} {
		args := append([]string{"policy", "place"}, c.args...)
		if !strings.Contains(strings.Join(c.args, " "), "--policy") {
			args = append(args, "--policy", good)
		}
		code, _, errOut := testMain.Capture(append(args, "--out", filepath.Join(t.TempDir(), "x.yaml"))...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, want %d with %q; stderr:\n%s", c.args, code, c.code, c.want, errOut)
		}
	}
}
