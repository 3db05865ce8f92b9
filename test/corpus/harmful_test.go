package corpus

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/agent-sandbox/agent-sandbox/internal/plandiff"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/tfcheck"
	"github.com/agent-sandbox/agent-sandbox/internal/toolrun"
)

// requiredHarmful are the attacks issue 21 asks the corpus to hold, by folder name.
var requiredHarmful = []string{
	"incident", "incident-json", "host-network", "host-pid", "host-ipc", "token-automount",
	"secret-env-key-ref", "secret-env-from", "rbac-cluster-admin-binding", "rbac-role", "capability-sys-admin",
	"service-load-balancer", "service-node-port", "image-swap", "command-change", "hidden-among-many",
	"for-each-privileged", "dynamic-privileged", "host-port", "unknown-privileged", "destroy-service",
}

// Every harmful plan passes the workspace allowlist, exactly as the MCP server and the sandbox check it:
// the allowlist stops code execution, not harmful workloads, which is why the plan rules exist. A case the
// allowlist refused would prove nothing about them.
func TestHarmfulPlansPassTheWorkspaceAllowlist(t *testing.T) {
	cases := mustHarmful(t)
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			if err := tfcheck.Check(c.Files, toolrun.CheckOptions()); err != nil {
				t.Fatalf("the workspace allowlist refuses it, so it cannot reach the plan rules:\n%v", err)
			}
		})
	}
}

// The corpus is well-formed: at least 15 cases with unique names, each naming at least one rule it proves,
// only rules the policy ships, the addresses a refusal names and the risk line the approval screen shows.
func TestHarmfulPlansAreWellFormed(t *testing.T) {
	cases := mustHarmful(t)
	if len(cases) < 15 {
		t.Fatalf("%d harmful plans; want at least 15", len(cases))
	}
	seen := map[string]bool{}
	for _, c := range cases {
		if seen[c.Name] {
			t.Errorf("two cases named %s", c.Name)
		}
		seen[c.Name] = true
		if len(c.Rules) == 0 {
			t.Errorf("%s names no expected rule", c.Name)
		}
		for _, r := range append(slices.Clone(c.Rules), c.Also...) {
			if !slices.Contains(PlanRules, r) {
				t.Errorf("%s names %q, which is not a shipped plan rule", c.Name, r)
			}
		}
		for _, r := range c.Also {
			if slices.Contains(c.Rules, r) {
				t.Errorf("%s lists %s under both RULES and ALSO", c.Name, r)
			}
		}
		if two := slices.Contains(c.Rules, TwoApproversRule); two != (c.Approvals > 1) || (two && len(c.Rules) != 1) {
			t.Errorf("%s: the two-person rule goes alone and with APPROVALS: 2 or more (rules %v, approvals %d)", c.Name, c.Rules, c.Approvals)
		}
		if !strings.HasPrefix(c.Flag, "!! RISK ") || !slices.ContainsFunc(c.At, func(a string) bool { return strings.Contains(c.Flag, a) }) {
			t.Errorf("%s: flag %q is not a risk line about one of %v", c.Name, c.Flag, c.At)
		}
		if _, ok := c.Files["versions.tf"]; !ok {
			t.Errorf("%s has no versions.tf", c.Name)
		}
	}
	for _, n := range requiredHarmful {
		if !seen[n] {
			t.Errorf("the corpus lacks %s", n)
		}
	}
	// Every shipped rule is proved by some case.
	for _, r := range PlanRules {
		if !slices.ContainsFunc(cases, func(c HarmfulPlan) bool { return slices.Contains(c.Rules, r) }) {
			t.Errorf("no case proves %s", r)
		}
	}
}

// Each case is the demo workspace changed, not another module: the same provider pin, the same variables
// file unless the attack is in it, and some file different from the demo's.
func TestHarmfulPlansAreTheDemoChanged(t *testing.T) {
	demo := map[string][]byte{}
	for _, n := range []string{"main.tf", "variables.tf", "versions.tf"} {
		b, err := os.ReadFile(filepath.Join("../../terraform/k8s-demo", n))
		if err != nil {
			t.Fatal(err)
		}
		demo[n] = b
	}
	for _, c := range mustHarmful(t) {
		if !bytes.Equal(c.Files["versions.tf"], demo["versions.tf"]) {
			t.Errorf("%s: versions.tf differs from terraform/k8s-demo's", c.Name)
		}
		if v, ok := c.Files["variables.tf"]; !ok || (!bytes.Equal(v, demo["variables.tf"]) && c.Name != "image-swap") {
			t.Errorf("%s: variables.tf missing or changed (only image-swap changes it)", c.Name)
		}
		_, hcl := c.Files["main.tf"]
		_, json := c.Files["main.tf.json"]
		if hcl == json {
			t.Errorf("%s: want exactly one of main.tf and main.tf.json", c.Name)
		}
		same := true
		for n, b := range c.Files {
			same = same && bytes.Equal(b, demo[n])
		}
		if same {
			t.Errorf("%s is the demo workspace unchanged", c.Name)
		}
	}
}

// Matches accepts a refusal that names one of the case's rules and one of its addresses, and nothing less:
// not a rule the case only may trigger, not a longer rule name, not the right rule at another resource.
func TestHarmfulPlanMatches(t *testing.T) {
	h := HarmfulPlan{Rules: []string{"plan-no-privileged", "plan-no-host-path"}, Also: []string{"plan-command-pinned"},
		At: []string{"kubernetes_deployment.web"}}
	for _, tc := range []struct {
		msg  string
		rule string
		ok   bool
	}{
		{"plan refused by rule plan-no-privileged at kubernetes_deployment.web: privileged must be false", "plan-no-privileged", true},
		{"check: plan refused by rule plan-no-host-path at kubernetes_deployment.web: …", "plan-no-host-path", true},
		{"plan refused by rule plan-command-pinned at kubernetes_deployment.web: command changed", "", false},
		{"plan refused by rule plan-no-privileged at kubernetes_service.web: …", "plan-no-privileged", false},
		{"plan refused by rule plan-no-privileged-x at kubernetes_deployment.web", "", false},
		{"workspace refused: main.tf:1,1: provisioner block", "", false},
		{"", "", false},
	} {
		rule, ok := h.Matches(tc.msg)
		if rule != tc.rule || ok != tc.ok {
			t.Errorf("Matches(%q) = %q, %v; want %q, %v", tc.msg, rule, ok, tc.rule, tc.ok)
		}
	}
}

// offlineTerraform is the terraform on PATH and the kubernetes provider mirror it works with offline
// ($AGENT_SANDBOX_TF_PROVIDER_MIRROR, which make tools builds); the test is skipped without either.
func offlineTerraform(t *testing.T) (bin, mirror string) {
	t.Helper()
	mirror = os.Getenv("AGENT_SANDBOX_TF_PROVIDER_MIRROR")
	if mirror == "" {
		t.Skip("AGENT_SANDBOX_TF_PROVIDER_MIRROR is not set: no kubernetes provider to plan with")
	}
	bin, err := exec.LookPath("terraform")
	if err != nil {
		t.Skip("no terraform on PATH")
	}
	return bin, mirror
}

// With the kubernetes provider at hand (AGENT_SANDBOX_TF_PROVIDER_MIRROR, as for `agent-sandbox approve`),
// real Terraform validates every case against the provider's schema: an attribute the provider does not
// have would make a case fail at plan for that reason instead of reaching the plan rules. No cluster is
// needed. Skipped without the mirror (make tools builds it).
func TestHarmfulPlansValidateWithTerraform(t *testing.T) {
	bin, mirror := offlineTerraform(t)
	for _, c := range mustHarmful(t) {
		t.Run(c.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			w, err := newLocalWorkdir(t.TempDir(), mirror, c.Files)
			if err != nil {
				t.Fatal(err)
			}
			tf := w.terraform(bin, filepath.Join(w.dir, "no-kubeconfig"))
			if _, err := tf(ctx, "init", "-input=false", "-no-color", "-backend=false"); err != nil {
				t.Fatal(err)
			}
			if _, err := tf(ctx, "validate", "-no-color"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func mustHarmful(t *testing.T) []HarmfulPlan {
	t.Helper()
	cases, err := HarmfulPlans()
	if err != nil {
		t.Fatal(err)
	}
	return cases
}

// After the demo's edit the live Deployment runs track "canary": every case moves to it by that one line
// (in either syntax), so that its plan changes what the attack changes and nothing else, and still passes
// the allowlist.
func TestHarmfulPlansOnTrack(t *testing.T) {
	for _, c := range mustHarmful(t) {
		moved, err := c.OnTrack("canary")
		if err != nil {
			t.Errorf("%s: %v", c.Name, err)
			continue
		}
		changed := 0
		for n, b := range moved.Files {
			if bytes.Equal(b, c.Files[n]) {
				continue
			}
			changed++
			if !bytes.Contains(b, []byte(`"canary"`)) || bytes.Count(b, []byte("\n")) != bytes.Count(c.Files[n], []byte("\n")) {
				t.Errorf("%s: %s changed by more than its track line", c.Name, n)
			}
		}
		if changed != 1 {
			t.Errorf("%s: %d files changed", c.Name, changed)
		}
		if err := tfcheck.Check(moved.Files, toolrun.CheckOptions()); err != nil {
			t.Errorf("%s on track canary: %v", c.Name, err)
		}
		if same, _ := c.OnTrack("stable"); !bytes.Equal(same.Files["versions.tf"], c.Files["versions.tf"]) {
			t.Errorf("%s: OnTrack(stable) changed it", c.Name)
		}
	}
	if _, err := (HarmfulPlan{}).OnTrack(`x" ; y`); err == nil {
		t.Error("a track that is not a label value was taken")
	}
}

// With the kubernetes provider at hand, real Terraform plans every case offline (no state, so every
// resource is a create; provider 1.13.4 connects to the cluster only to read or write, not to plan a
// create) and shows what the plan rules will see: a change at each of the case's addresses, the same
// Deployment from the JSON incident as from the HCL one, privileged unknown until apply in
// unknown-privileged, and run_as_user null (sent as 0) where root-by-omission leaves it unset. Skipped
// without the mirror.
func TestHarmfulPlansPlanOfflineWithTerraform(t *testing.T) {
	bin, mirror := offlineTerraform(t)
	shipped, err := policy.LoadFile("../../policy/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	plans := map[string]*plandiff.Plan{}
	for _, c := range mustHarmful(t) {
		t.Run(c.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			w, err := newLocalWorkdir(t.TempDir(), mirror, c.Files)
			if err != nil {
				t.Fatal(err)
			}
			// A cluster nobody listens on: planning creates must not need one.
			kc := filepath.Join(w.root, "kubeconfig")
			if err := os.WriteFile(kc, []byte(offlineKubeconfig), 0o600); err != nil {
				t.Fatal(err)
			}
			tf := w.terraform(bin, kc)
			if _, err := tf(ctx, "init", "-input=false", "-no-color", "-backend=false"); err != nil {
				t.Fatal(err)
			}
			if _, err := tf(ctx, "plan", "-input=false", "-no-color", "-lock=false", "-refresh=false", "-out=plan.tfplan"); err != nil {
				t.Fatal(err)
			}
			js, err := tf(ctx, "show", "-json", "plan.tfplan")
			if err != nil {
				t.Fatal(err)
			}
			p, err := plandiff.Parse(js)
			if err != nil {
				t.Fatal(err)
			}
			plans[c.Name] = p
			if c.Approvals > 0 {
				return // a destroy needs the state; the live run shows it
			}
			// The policy's shipped plan rules refuse it (all but a changed command or mount, which needs a
			// workload that exists: offline every resource is a create), and the approval screen flags it.
			if !slices.Equal(c.Rules, []string{"plan-command-pinned"}) && !slices.Equal(c.Rules, []string{"plan-mounts-pinned"}) {
				v := shipped.PlanRules.Evaluate(ctx, p)
				if rule, ok := c.Matches(v.Error()); !ok {
					t.Errorf("the shipped plan rules do not refuse it by %v at %v: %q", c.Rules, c.At, v.Error())
				} else {
					t.Logf("refused by %s", rule)
				}
			}
			lines, err := RiskLines(js)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := FlagShown(c.Flag, lines); !ok {
				t.Errorf("the approval screen does not show %q; its risk lines:\n%s", c.Flag, strings.Join(lines, "\n"))
			}
			for _, a := range c.At {
				if ch := change(p, a); ch == nil || ch.IsNoOp() {
					t.Errorf("the plan does not change %s", a)
				}
			}
		})
	}
	deployment := func(name string) any {
		if p := plans[name]; p != nil {
			if ch := change(p, "kubernetes_deployment.web"); ch != nil {
				return ch.After
			}
		}
		return nil
	}
	if a, b := deployment("incident"), deployment("incident-json"); a == nil || !reflect.DeepEqual(a, b) {
		t.Errorf("incident-json does not plan the same Deployment as incident:\n%v\n%v", a, b)
	}
	container := func(v any) any {
		return dig(v, "spec", 0, "template", 0, "spec", 0, "container", 0, "security_context", 0)
	}
	if p := plans["unknown-privileged"]; p != nil {
		if ch := change(p, "kubernetes_deployment.shadow"); ch == nil || dig(container(ch.AfterUnknown), "privileged") != true {
			t.Errorf("unknown-privileged: privileged is not unknown until apply in the plan")
		}
	}
	// What the plan says where the workspace leaves runAsUser unset is null, not the 0 that provider 1.13.4
	// sends to the API server at apply: plan-no-root-user must read a null run_as_user (and run_as_non_root)
	// of a security_context block that is there as root.
	if sc, ok := container(deployment("root-by-omission")).(map[string]any); !ok || sc["run_as_user"] != nil || sc["run_as_non_root"] != nil {
		t.Errorf("root-by-omission: the plan's container security_context is %v; want run_as_user and run_as_non_root null", sc)
	}
}

const offlineKubeconfig = `apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: none, user: {token: none}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
`

func change(p *plandiff.Plan, address string) *plandiff.Change {
	for i := range p.Changes {
		if p.Changes[i].Address == address {
			return &p.Changes[i]
		}
	}
	return nil
}

// dig follows a path of object keys and list indexes through a decoded plan value.
func dig(v any, path ...any) any {
	for _, el := range path {
		switch k := el.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

// LocalPlanner's saved plans are plans the apply sandbox's check takes for its own: the same allowlist
// check on the plan (its embedded configuration and its backend, tfcheck.CheckPlan) admits them, so that a
// live refusal of one comes from the plan rules and not from how it was made. Offline (no state Secret,
// a cluster nobody listens on), with the provider mirror; skipped without it.
func TestLocalPlannerMakesPlansTheCheckAdmits(t *testing.T) {
	_, mirror := offlineTerraform(t)
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, []byte(offlineKubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	lp := &LocalPlanner{ProviderMirror: mirror, Kubeconfig: kc, Admin: fake.NewClientset(), Namespace: "demo-app", Workspace: "k8s-demo", TempDir: t.TempDir()}
	for _, name := range []string{"incident", "incident-json"} {
		c := harmfulByName(t, name)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		plan, show, err := lp.Plan(ctx, c.Files)
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := tfcheck.CheckPlan(plan, toolrun.CheckOptions()); err != nil {
			t.Errorf("%s: the apply's allowlist check refuses the local plan, so a live refusal would not prove the rules: %v", name, err)
		}
		if _, err := plandiff.Parse(show); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func harmfulByName(t *testing.T, name string) HarmfulPlan {
	t.Helper()
	for _, c := range mustHarmful(t) {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no harmful plan %s", name)
	return HarmfulPlan{}
}
