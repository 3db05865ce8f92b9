package rules_test

import (
	"go/ast"
	"go/token"
	"sort"
	"strconv"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/rules"
	"github.com/agent-sandbox/agent-sandbox/test/corpus"
)

// withoutCase are the rules the adversarial corpus has no case for, each with the reason. A rule added to
// the registry (or to the policy) without a corpus case fails TestEveryRuleHasACorpusCase until it gets a
// case or an entry here.
var withoutCase = map[rules.ID]string{
	rules.PolicyNotLoaded:      "only reachable before the webhook has loaded a policy; the corpus runs against a webhook that serves one",
	rules.Decode:               "the API server sends the webhook only objects it decoded itself; only a broken API server sends one that does not decode",
	rules.Render:               "a call the policy cannot render is refused earlier, as invalid-parameters or namespace-not-allowed; render is the fail-closed backstop",
	rules.ApprovalKeys:         "only reachable with no approver key configured; the corpus runs against a webhook that trusts its approver",
	rules.ApprovalLedger:       "only reachable when the webhook has no approval ledger (a misconfigured webhook)",
	rules.AuditAnchor:          "only reachable when the anchor ledger is missing or the API server refuses the anchor's write",
	rules.SubresourceAllowlist: "the corpus's subresource cases each name the rule of the subresource they attack; an unknown subresource (one a future Kubernetes adds) cannot be sent to a real API server",
	rules.ClaimLedger:          "only reachable when the claim ledger is missing or the API server refuses its write",
	rules.ClaimStale:           "needs the policy to change between a warm Pod's start and its claim; covered by the webhook's unit tests",
	rules.ClaimPending:         "needs a claim admitted and anchored but never stored (a webhook replica killed between the two, or two claims admitted on one resourceVersion), which the corpus cannot cause on demand; the webhook's unit tests and test/integration's TestClaimNeverStoredIsVoided cover it",
	rules.ClaimSignature:       "the signature is written by the webhook's mutating endpoint, after validation; an attacker's own signature is refused by claim-exact first, and the webhook's unit tests cover the rule",
	rules.TerraformAllowlist:   "the Terraform allowlist has its own corpus (internal/tfcheck/corpus.go, run by its unit tests); its refusals carry no rule name",
	"node-placement":           "the shipped policy sets no nodeSelector or tolerations, so the listing (built on it) has no case; the corpus's placement cases refuse it on a placed policy (test/integration's TestWebhookAdmissionPlacement, make verify under make up PROFILE=gke)",
	"plan-allowed-volumes":     "no harmful plan yet; internal/policy/plan_rules_test.go covers it",
	"plan-bounded-resources":   "a harmful plan's case must name the risk line its screen shows, and the screen does not flag a change of replicas or resources (every scaling change would be flagged); internal/policy/plan_rules_test.go covers it on a real plan of the demo, and the target namespace's ResourceQuota bounds the total",
	"plan-known-pod-fields":    "it refuses attributes the pinned provider (1.13.4) does not have, so no plan real Terraform makes with it can hold one; internal/policy/plan_rules_test.go covers it with a newer provider's attributes, and test/corpus's TestKnownPodFieldsAreTheProvidersSchemaWithTerraform keeps its lists the provider's schema",
	rules.RateLimited:          "an MCP server guardrail: the admission corpus bypasses the MCP server; internal/service's unit tests cover it",
	rules.ApprovalRequiredCall: "an MCP server guardrail: the admission corpus bypasses the MCP server (the webhook's own approval-required has cases)",
}

// covered is every rule the corpus has a case for: the admission cases (built without a cluster, never
// submitted), the warm-Pod cases and the harmful plans.
func covered(t *testing.T, p *policy.Compiled) map[rules.ID]bool {
	t.Helper()
	env, err := corpus.Listing(p)
	if err != nil {
		t.Fatal(err)
	}
	cases := env.All(&batchv1.Job{}, &corev1.Pod{})
	cases = append(cases, env.WarmCases(&corev1.Pod{}, &corev1.Pod{}, env.Admin)...)
	out := map[rules.ID]bool{}
	for _, c := range cases {
		if strings.HasPrefix(c.Rule, "vault:") {
			continue // Vault's own refusal, not one of ours
		}
		// A case may name a rule with the start of its reason ("approval: this approval was already used"), or
		// several of the policy's rules that fail together, as the webhook names them ("no-host-path,allowed-volume-types").
		name, _, _ := strings.Cut(c.Rule, ":")
		for _, n := range strings.Split(name, ",") {
			out[rules.ID(strings.TrimSpace(n))] = true
		}
	}
	// The warm claim lifecycle (test/corpus/warm.go) is a scenario, not cases: its steps name their rule in calls
	// refused("what", "rule", err).
	for _, id := range scenarioRules(t) {
		out[id] = true
	}
	plans, err := corpus.HarmfulPlans()
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range plans {
		for _, r := range h.Rules {
			out[rules.ID(r)] = true
		}
	}
	if len(cases) < 100 || len(plans) < 10 {
		t.Fatalf("the corpus lists only %d cases and %d harmful plans: is Listing still building them?", len(cases), len(plans))
	}
	return out
}

// TestEveryRuleHasACorpusCase: every registered rule, the policy's CEL and plan rules included, has a case
// in the adversarial corpus or an entry in withoutCase; every case names a registered rule; and no entry in
// withoutCase is stale.
func TestEveryRuleHasACorpusCase(t *testing.T) {
	p, err := policy.LoadFile("../../policy/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	all := rules.WithPolicy(p.Policy)
	has := covered(t, p)
	var missing []string
	for _, r := range all {
		_, allowed := withoutCase[r.ID]
		switch {
		case has[r.ID] && allowed:
			t.Errorf("rule %s has a corpus case now: remove it from withoutCase", r.ID)
		case !has[r.ID] && !allowed:
			missing = append(missing, string(r.ID))
		}
	}
	if len(missing) > 0 {
		t.Errorf("rules without a case in the adversarial corpus (test/corpus; add one, or an entry with the reason in withoutCase): %s", strings.Join(missing, ", "))
	}
	for id := range withoutCase {
		if _, ok := rules.Lookup(all, id); !ok {
			t.Errorf("withoutCase names %s, which is not a registered rule", id)
		}
	}
	var unknown []string
	for id := range has {
		if _, ok := rules.Lookup(all, id); !ok {
			unknown = append(unknown, string(id))
		}
	}
	sort.Strings(unknown)
	if len(unknown) > 0 {
		t.Errorf("corpus cases name rules that are not registered (internal/rules or the policy): %s", strings.Join(unknown, ", "))
	}
}

// scenarioRules are the rules named by the corpus's scenario steps, refused("what", "rule", err), read from
// the corpus's source.
func scenarioRules(t *testing.T) []rules.ID {
	t.Helper()
	var out []rules.ID
	eachCall(t, "../../test/corpus/*.go", []string{"refused"}, func(_ *token.FileSet, _ string, call *ast.CallExpr) {
		if len(call.Args) < 2 {
			return
		}
		if lit, ok := call.Args[1].(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if v, err := strconv.Unquote(lit.Value); err == nil {
				out = append(out, rules.ID(v))
			}
		}
	})
	if len(out) == 0 {
		t.Fatal("no refused(\"what\", \"rule\", err) step found in test/corpus: update scenarioRules")
	}
	return out
}
