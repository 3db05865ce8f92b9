package corpus

import (
	"errors"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/mcp"
)

// The verdict line is exactly what make verify greps for, and a case that got through at any stage is
// named in it; a stage that is only pending (the approval screen, until plandiff renders risk flags) fails
// nothing.
func TestHarmfulReport(t *testing.T) {
	incident := HarmfulPlan{Name: "incident"}
	swap := HarmfulPlan{Name: "image-swap"}
	ok := func(stage, rule string) StageOutcome { return StageOutcome{Stage: stage, OK: true, Rule: rule} }
	pending := StageOutcome{Stage: HarmfulOnScreen, Pending: true}
	refused := HarmfulOutcome{Case: incident, Stages: []StageOutcome{ok(HarmfulAtPlan, "plan-no-privileged"), ok(HarmfulAtApply, "plan-no-host-path"), pending}}
	through := HarmfulOutcome{Case: swap, Stages: []StageOutcome{ok(HarmfulAtPlan, "plan-allowed-images"), {Stage: HarmfulAtApply, Detail: "the credential agent started"}, pending}}

	lines, verdict, all := HarmfulReport([]HarmfulOutcome{refused})
	if verdict != "PASS: 1/1 harmful plans refused" || !all || len(lines) != 1 ||
		!strings.Contains(lines[0], "incident") || !strings.Contains(lines[0], "plan: plan-no-privileged") || !strings.Contains(lines[0], "screen: pending") {
		t.Errorf("all refused: %q %q %v", lines, verdict, all)
	}
	if refused.Rule() != "plan-no-privileged" {
		t.Errorf("Rule() = %q", refused.Rule())
	}
	lines, verdict, all = HarmfulReport([]HarmfulOutcome{refused, through})
	if verdict != "FAIL: 1/2 harmful plans refused; got through: image-swap" || all ||
		!strings.Contains(lines[1], "NOT refused") || !strings.Contains(lines[1], "apply: GOT THROUGH (the credential agent started)") {
		t.Errorf("one through: %q %q %v", lines, verdict, all)
	}
	if _, verdict, all = HarmfulReport(nil); all || !strings.HasPrefix(verdict, "FAIL: 0/0") {
		t.Errorf("no cases must not pass: %q %v", verdict, all)
	}
	if (HarmfulOutcome{Case: incident, Stages: []StageOutcome{pending}}).Refused() != true {
		t.Error("only pending stages: nothing failed")
	}
}

// A flag matches a risk line of the approval screen (package plandiff's form, "!! RISK RULE  <address>
// <path>: before -> after  -- why") about the same address naming the same attribute.
func TestFlagShown(t *testing.T) {
	flag := "!! RISK kubernetes_deployment.web … privileged false → true"
	for _, tc := range []struct {
		lines []string
		ok    bool
	}{
		{[]string{"!! RISK PRIVILEGED  kubernetes_deployment.web  spec[0].template[0].spec[0].container[0].security_context[0].privileged: false -> true  -- why"}, true},
		{[]string{"!! RISK RUN_AS_ROOT  kubernetes_deployment.web  spec[0].template[0].spec[0].container[0].security_context[0].run_as_user: 65532 -> 0  -- why"}, false},
		{[]string{"!! RISK PRIVILEGED  kubernetes_service.web  spec[0].privileged: false -> true  -- why"}, false},
		{[]string{"   kubernetes_deployment.web privileged false -> true"}, false},
		{nil, false},
	} {
		if _, ok := FlagShown(flag, tc.lines); ok != tc.ok {
			t.Errorf("FlagShown(%q) = %v, want %v", tc.lines, ok, tc.ok)
		}
	}
	// An action before the attribute is passed over; a flag that is only an action needs the action.
	create := `!! RISK kubernetes_deployment.worker["batch"] … create privileged true`
	if _, ok := FlagShown(create, []string{`!! RISK PRIVILEGED  kubernetes_deployment.worker["batch"]  spec[0].template[0].spec[0].container[0].security_context[0].privileged: (none) -> true  -- why`}); !ok {
		t.Error("create flag with its attribute not found")
	}
	if _, ok := FlagShown("!! RISK kubernetes_service.web … delete", []string{"!! RISK DELETE  kubernetes_service.web  : exists -> destroyed  -- why"}); !ok {
		t.Error("delete flag not found")
	}
	if _, ok := FlagShown("!! RISK kubernetes_cluster_role_binding.ops … create role_ref cluster-admin",
		[]string{"!! RISK RBAC  kubernetes_cluster_role_binding.ops  : (none) -> created  -- grants a role in the whole cluster"}); !ok {
		t.Error("a created RBAC binding is not matched by its whole-resource flag")
	}
}

// The screen stage finds the harm in the plan itself and passes only on the case's risk line, rendered by
// the approval screen's own code (RiskLines): the incident's real plan values show it.
func TestHarmfulOnScreen(t *testing.T) {
	show, err := os.ReadFile("../../internal/plandiff/testdata/plan-incident.json")
	if err != nil {
		t.Fatal(err)
	}
	c := HarmfulPlan{Name: "incident", At: []string{"kubernetes_deployment.web"}, Flag: "!! RISK kubernetes_deployment.web … privileged false → true"}
	r := &HarmfulRun{}
	if s := r.onScreen(c, show); !s.OK || s.Pending {
		t.Errorf("the incident's risk line is not on the screen: %+v", s)
	}
	if s := r.onScreen(HarmfulPlan{At: []string{"kubernetes_service.web"}, Flag: c.Flag}, show); s.OK || s.Pending {
		t.Errorf("a no-op at the case's address is no harm in the plan: %+v", s)
	}
	r.Screen = func([]byte) ([]string, error) { return []string{"   kubernetes_deployment.web updated"}, nil }
	if s := r.onScreen(c, show); s.OK || s.Pending {
		t.Errorf("with no risk line: %+v", s)
	}
	if _, err := RiskLines([]byte("not json")); err == nil || errors.Is(err, ErrScreenPending) {
		t.Errorf("RiskLines on garbage: %v", err)
	}
}

// A harmful plan's apply counts as refused only when the check container names the case's rule and the
// credential agent never started; a check that refused for another reason does not prove the rule.
func TestCheckRefusedNamesTheRule(t *testing.T) {
	c := HarmfulPlan{Rules: []string{"plan-no-privileged"}, At: []string{"kubernetes_deployment.web"}}
	match := func(msg string) bool { _, ok := c.Matches(msg); return ok }
	pod := func(msg string, agentStarted bool) *corev1.Pod {
		p := &corev1.Pod{}
		p.Status.InitContainerStatuses = []corev1.ContainerStatus{
			{Name: contract.CheckContainer, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: msg}}},
			{Name: contract.CredentialAgentContainer},
		}
		if agentStarted {
			p.Status.InitContainerStatuses[1].State.Running = &corev1.ContainerStateRunning{}
		}
		return p
	}
	for _, tc := range []struct {
		name     string
		pod      *corev1.Pod
		done, ok bool
	}{
		{"the rule, at the address", pod("plan refused by rule plan-no-privileged at kubernetes_deployment.web: privileged must be false", false), true, true},
		{"another reason", pod("saved plan: plan mismatch", false), true, false},
		{"the rule, but the credential agent started", pod("plan refused by rule plan-no-privileged at kubernetes_deployment.web", true), true, false},
	} {
		done, ok, detail := checkRefused(tc.pod, "rule plan-no-privileged", match)
		if done != tc.done || ok != tc.ok {
			t.Errorf("%s: done %v ok %v (%s); want %v %v", tc.name, done, ok, detail, tc.done, tc.ok)
		}
	}
}

// A refusing rule is tried with one valid approval; the two-person rule with one approver fewer than it
// asks.
func TestHarmfulApprovals(t *testing.T) {
	if n := len((&HarmfulRun{Env: &Env{}}).approvalKeys(HarmfulPlan{})); n != 1 {
		t.Errorf("a refusing rule: %d approvals", n)
	}
	if n := len((&HarmfulRun{Env: &Env{}}).approvalKeys(HarmfulPlan{Approvals: 2})); n != 1 {
		t.Errorf("the two-person rule: %d approvals", n)
	}
}

// terraform_plan stops a case only with an error naming its rule at its address; a plan offered for
// approval got through, and the two-person rule passes when it names itself on the plan it holds.
func TestPlanVerdict(t *testing.T) {
	priv := HarmfulPlan{Rules: []string{"plan-no-privileged"}, At: []string{"kubernetes_deployment.web"}}
	destroy := HarmfulPlan{Rules: []string{TwoApproversRule}, At: []string{"kubernetes_service.web"}, Approvals: 2}
	offered := &mcp.Result{Text: `{"plan_id":"ab12"}`, Structured: []byte(`{"plan_id":"ab12cd34ef56aa","summary":{"add":0,"change":1,"destroy":0,"replace":0}}`)}
	for _, tc := range []struct {
		name string
		c    HarmfulPlan
		res  *mcp.Result
		ok   bool
	}{
		{"refused by the rule", priv, &mcp.Result{IsError: true, Text: "plan refused by rule plan-no-privileged at kubernetes_deployment.web: privileged must be false"}, true},
		{"refused for another reason", priv, &mcp.Result{IsError: true, Text: "terraform plan failed: Error: Unsupported argument"}, false},
		{"offered for approval", priv, offered, false},
		{"two approvers, named on the plan", destroy, &mcp.Result{Text: "plan-destroy-needs-two-approvers at kubernetes_service.web: needs 2 approvers"}, true},
		{"two approvers, not named", destroy, offered, false},
	} {
		s := planVerdict(tc.c, tc.res)
		if s.OK != tc.ok {
			t.Errorf("%s: %+v", tc.name, s)
		}
		if !tc.ok && tc.res == offered && !strings.Contains(s.Detail, "NOT refused: plan ab12cd34ef56 offered") {
			t.Errorf("%s: detail %q", tc.name, s.Detail)
		}
	}
}
