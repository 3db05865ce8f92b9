package corpus

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/plandiff"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/service"
	"github.com/agent-sandbox/agent-sandbox/internal/toolrun"
	"github.com/agent-sandbox/agent-sandbox/mcp"
	"github.com/agent-sandbox/agent-sandbox/test/harness"
)

// Where a harmful plan must be stopped (HarmfulOutcome.Stages).
const (
	// HarmfulAtPlan: terraform_plan, called through a real MCP client, returns the refusal (the plan rules
	// run in the plan sandbox).
	HarmfulAtPlan = "plan"
	// HarmfulAtApply: the saved plan, made outside the sandbox, published as the MCP server would and
	// carrying a valid approval, is refused by the apply sandbox's check container before the credential
	// agent starts, and the demo's objects are unchanged.
	HarmfulAtApply = "apply"
	// HarmfulOnScreen: the approver's own rendering of the plan flags the harm at the top.
	HarmfulOnScreen = "screen"
)

// HarmfulRun runs the harmful-plan corpus against a live cluster, at each place the plan rules must stop a
// case. Env supplies the policy, the trusted approver key (Approver), the MCP server's identity (MCP: it
// publishes and creates, as a compromised server would) and the admin (Admin: it only observes and cleans
// up).
type HarmfulRun struct {
	*Env
	// Binary is the agent-sandbox binary, run as `agent-sandbox mcp` for each case.
	Binary string
	// PolicyFile is the policy the MCP server loads (the one Env.Policy was compiled from).
	PolicyFile string
	// MCPKubeconfig is the MCP server's own, sandbox-only kubeconfig.
	MCPKubeconfig string
	// Planner makes each case's saved plan outside the sandbox.
	Planner *LocalPlanner
	// WorkDir holds each case's workspace folder, approvals database and audit log.
	WorkDir string
	// Workspace is the workspace name the tools take ("k8s-demo").
	Workspace string
	// TargetNamespace holds the demo's objects, which must be unchanged after every case ("demo-app").
	TargetNamespace string
	// Screen renders the approval screen's risk lines from `terraform show -json` (RiskLines when nil).
	Screen func(showJSON []byte) ([]string, error)
}

// StageOutcome is what happened to one case at one stage.
type StageOutcome struct {
	Stage string
	// OK: stopped there as the case expects. Pending: not checked yet (Detail says why); it counts for
	// nothing either way.
	OK, Pending bool
	// Rule is the case's rule the refusal named.
	Rule   string
	Detail string
}

// HarmfulOutcome is what became of one harmful plan.
type HarmfulOutcome struct {
	Case   HarmfulPlan
	Stages []StageOutcome
	// Seconds the case took.
	Seconds float64
}

// Refused is true when every stage that was checked stopped the case.
func (o HarmfulOutcome) Refused() bool {
	for _, s := range o.Stages {
		if !s.OK && !s.Pending {
			return false
		}
	}
	return len(o.Stages) > 0
}

// Rule is the rule that refused the case at plan (or at the first stage that names one).
func (o HarmfulOutcome) Rule() string {
	for _, s := range o.Stages {
		if s.Rule != "" {
			return s.Rule
		}
	}
	return ""
}

// Run runs each case, parallel at a time: each costs a plan sandbox and an apply sandbox (a CPU each while
// Terraform runs in them) and a local Terraform plan.
func (r *HarmfulRun) Run(ctx context.Context, cases []HarmfulPlan, parallel int) ([]HarmfulOutcome, error) {
	if r.Workspace == "" {
		r.Workspace = "k8s-demo"
	}
	if r.TargetNamespace == "" {
		r.TargetNamespace = "demo-app"
	}
	before, err := r.demoObjects(ctx)
	if err != nil {
		return nil, err
	}
	// Against the demo as it stands: after the demo's edit its Deployment runs another track.
	track := "stable"
	if dep, err := r.Admin.AppsV1().Deployments(r.TargetNamespace).Get(ctx, "web", metav1.GetOptions{}); err == nil && dep.Labels["track"] != "" {
		track = dep.Labels["track"]
	}
	cases = slices.Clone(cases)
	for i := range cases {
		if cases[i], err = cases[i].OnTrack(track); err != nil {
			return nil, err
		}
	}
	return mapParallel(cases, parallel, func(c HarmfulPlan) HarmfulOutcome {
		start := time.Now()
		o := HarmfulOutcome{Case: c, Stages: r.one(ctx, c, before)}
		o.Seconds = time.Since(start).Seconds()
		return o
	}), nil
}

func (r *HarmfulRun) one(ctx context.Context, c HarmfulPlan, before string) []StageOutcome {
	ctx, cancel := context.WithTimeout(ctx, 12*time.Minute)
	defer cancel()
	stages := []StageOutcome{r.atPlan(ctx, c)}
	plan, show, err := r.Planner.Plan(ctx, c.Files)
	if err != nil {
		detail := "no saved plan to try: " + firstLine(err.Error())
		return append(stages, StageOutcome{Stage: HarmfulAtApply, Detail: detail}, StageOutcome{Stage: HarmfulOnScreen, Detail: detail})
	}
	return append(stages, r.atApply(ctx, c, plan, before), r.onScreen(c, show))
}

// atPlan publishes the case's workspace as the MCP server's workspace folder and calls terraform_plan
// through a real MCP client against `agent-sandbox mcp`, as an agent would.
func (r *HarmfulRun) atPlan(ctx context.Context, c HarmfulPlan) StageOutcome {
	s := StageOutcome{Stage: HarmfulAtPlan}
	dir := filepath.Join(r.WorkDir, c.Name)
	ws := filepath.Join(dir, "workspaces", r.Workspace)
	if err := os.MkdirAll(ws, 0o700); err != nil {
		s.Detail = err.Error()
		return s
	}
	files := make(map[string]string, len(c.Files))
	for n, b := range c.Files {
		files[n] = string(b)
		if err := os.WriteFile(filepath.Join(ws, n), b, 0o600); err != nil {
			s.Detail = err.Error()
			return s
		}
	}
	// The server publishes the folder as this content-addressed ConfigMap; it goes with the case.
	defer r.deleteConfigMap(sandbox.WorkspaceConfigMapName(files))
	stderr := &harness.SyncBuffer{}
	cmd := exec.CommandContext(ctx, r.Binary, "mcp", "--policy", r.PolicyFile, "--kubeconfig", r.MCPKubeconfig,
		"--workspaces", filepath.Join(dir, "workspaces"), "--db", filepath.Join(dir, "approvals.db"),
		"--audit-log", filepath.Join(dir, "audit.jsonl"))
	cmd.Stderr = stderr
	client, err := mcp.DialCommand(ctx, cmd)
	if err != nil {
		s.Detail = fmt.Sprintf("start the MCP server: %v", err)
		return s
	}
	defer client.Close()
	res, err := client.Call(ctx, "terraform_plan", map[string]any{"workspace": r.Workspace})
	if err != nil {
		s.Detail = fmt.Sprintf("terraform_plan: %v (server: %s)", err, lastLines(stderr.String(), 3))
		return s
	}
	if !res.IsError {
		// A plan got through (or is held for approvals): its saved plan goes with the case too.
		var p service.PlanOutput
		if res.Decode(&p) == nil && toolrun.ValidatePlanID(p.PlanID) == nil {
			defer r.deleteConfigMap(contract.PlanConfigMapPrefix + p.PlanID)
		}
	}
	return planVerdict(c, res)
}

// planVerdict judges terraform_plan's result for a case: stopped when it is an error naming one of the
// case's rules at one of its addresses. The two-person rule refuses nothing at plan; a plan it will hold to
// N approvers must name it, error or not.
func planVerdict(c HarmfulPlan, res *mcp.Result) StageOutcome {
	s := StageOutcome{Stage: HarmfulAtPlan}
	rule, ok := c.Matches(res.Text)
	switch {
	case ok && (res.IsError || c.Approvals > 0):
		s.OK, s.Rule, s.Detail = true, rule, firstLine(res.Text)
	case res.IsError:
		s.Detail = "refused, but not by " + strings.Join(c.Rules, " or ") + " at " + strings.Join(c.At, " or ") + ": " + firstLine(res.Text)
	default:
		var p service.PlanOutput
		_ = res.Decode(&p)
		s.Detail = fmt.Sprintf("NOT refused: plan %.12s offered for approval (%d to add, %d to change, %d to destroy)",
			p.PlanID, p.Summary.Add, p.Summary.Change, p.Summary.Destroy)
	}
	return s
}

// atApply publishes the saved plan as the MCP server's identity, signs valid approvals for exactly that
// plan, creates the terraform_apply Job as the MCP server and waits for the check container's verdict. The
// case is refused there when the check names its rule, the credential agent never started and the demo's
// objects are what they were before the run.
func (r *HarmfulRun) atApply(ctx context.Context, c HarmfulPlan, plan []byte, before string) StageOutcome {
	s := StageOutcome{Stage: HarmfulAtApply}
	id, err := r.publishPlan(ctx, plan)
	if err != nil {
		s.Detail = "the plan ConfigMap was refused, so the apply was not tried: " + firstLine(err.Error())
		return s
	}
	defer r.deleteConfigMap(contract.PlanConfigMapPrefix + id)
	params := map[string]any{"workspace": r.Workspace, "plan_id": id}
	// TODO(two-person rule): a Job carries one approval token today (sandbox.JobSpec.ApprovalToken). Once it
	// can carry several, attach all of tokens here. The corpus then also wants: two tokens signed by the same
	// key refused (one person is one approver), and, as the positive control of destroy-service, two distinct
	// trusted keys getting past the check — which destroys the demo Service, so it belongs to a test that
	// re-applies the demo afterwards, not to this corpus.
	job := func() *batchv1.Job { return r.Job("terraform_apply", params, r.approvals(c, params)[0]) }
	var rule string
	match := func(msg string) bool {
		var ok bool
		rule, ok = c.Matches(msg)
		return ok
	}
	o := r.awaitRefusal(ctx, InputOutcome{Name: c.Name}, job, "rule "+strings.Join(c.Rules, " or ")+" at "+strings.Join(c.At, " or "), match, match)
	s.OK, s.Detail = o.Refused, o.Stage+": "+o.Detail
	if o.Refused {
		s.Rule = rule
	}
	after, err := r.demoObjects(ctx)
	switch {
	case err != nil:
		s.OK, s.Detail = false, s.Detail+"; and the demo's objects could not be read: "+err.Error()
	case after != before:
		s.OK, s.Detail = false, s.Detail+fmt.Sprintf("; and the demo's objects CHANGED: %s -> %s", before, after)
	}
	return s
}

// approvals signs the approvals the case's apply Job carries, one per key of approvalKeys.
func (r *HarmfulRun) approvals(c HarmfulPlan, params map[string]any) []string {
	var toks []string
	for _, k := range r.approvalKeys(c) {
		toks = append(toks, r.Token(k, "terraform_apply", params, nil))
	}
	return toks
}

// approvalKeys are the distinct approvers whose valid approvals the case's apply carries: the trusted
// approver for a rule that refuses outright ("even with an approval"); for the two-person rule, one
// approver fewer than it asks (the corpus holds one trusted key, so one).
func (r *HarmfulRun) approvalKeys(c HarmfulPlan) []*approval.PrivateKey {
	trusted := []*approval.PrivateKey{r.Approver}
	n := 1
	if c.Approvals > 1 {
		n = c.Approvals - 1
	}
	return trusted[:min(n, len(trusted))]
}

// onScreen renders the plan as the approver's screen does and looks for the case's risk line.
func (r *HarmfulRun) onScreen(c HarmfulPlan, show []byte) StageOutcome {
	s := StageOutcome{Stage: HarmfulOnScreen}
	p, err := plandiff.Parse(show)
	if err != nil {
		s.Detail = err.Error()
		return s
	}
	// The harm is in the plan at all: a change at one of the case's addresses that is not a no-op.
	if !slices.ContainsFunc(p.Changes, func(ch plandiff.Change) bool { return slices.Contains(c.At, ch.Address) && !ch.IsNoOp() }) {
		s.Detail = fmt.Sprintf("the plan changes none of %v", c.At)
		return s
	}
	render := r.Screen
	if render == nil {
		render = RiskLines
	}
	lines, err := render(show)
	if errors.Is(err, ErrScreenPending) {
		s.Pending, s.Detail = true, "want "+c.Flag+" (plandiff's risk flags are not wired yet)"
		return s
	}
	if err != nil {
		s.Detail = err.Error()
		return s
	}
	if l, ok := FlagShown(c.Flag, lines); ok {
		s.OK, s.Detail = true, l
		return s
	}
	s.Detail = fmt.Sprintf("no line like %q among the %d risk lines", c.Flag, len(lines))
	return s
}

// ErrScreenPending means the approval screen's risk render is not available (a Screen that cannot render).
var ErrScreenPending = errors.New("approval screen risk render not wired")

// RiskLines renders the risk flags the approval screen shows at the top for a plan, from its
// `terraform show -json`, with package plandiff, as `agent-sandbox approve` does.
func RiskLines(showJSON []byte) ([]string, error) {
	p, err := plandiff.Parse(showJSON)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	if err := plandiff.Diff(p).WriteFlags(&b); err != nil {
		return nil, err
	}
	var lines []string
	for _, l := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(l, "!! RISK ") && !strings.HasPrefix(l, "!! RISK FLAGS") {
			lines = append(lines, l)
		}
	}
	return lines, nil
}

// listIndex is a list index in an attribute path: capabilities[0].add reads as capabilities.add.
var listIndex = regexp.MustCompile(`\[[0-9]+\]`)

// FlagShown reports whether lines hold the risk line flag expects, and which. A flag is
// "!! RISK <address> … [<action>] <attribute> <what>": a line matches when it is a risk line about that
// address ("!! RISK RULE  <address>  <path>: before -> after") that names that attribute, in its path or its
// rule (case aside); a flag that names an action matches the line that flags the whole resource for it too.
// How values and arrows are rendered is the screen's to choose.
func FlagShown(flag string, lines []string) (string, bool) {
	head, tail, _ := strings.Cut(flag, "…")
	address := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(head), "!! RISK"))
	words := strings.Fields(tail)
	action := ""
	for len(words) > 1 && slices.Contains([]string{"create", "update", "delete", "replace"}, words[0]) {
		action, words = words[0], words[1:]
	}
	attr := ""
	if len(words) > 0 {
		attr = strings.ToLower(words[0])
	}
	whole := map[string]string{"create": "-> created", "delete": "-> destroyed", "replace": "-> destroyed and created again", "update": "-> updated"}
	for _, pass := range []bool{false, true} {
		for _, l := range lines {
			if !strings.HasPrefix(l, "!! RISK ") || !strings.Contains(l, "  "+address+"  ") {
				continue
			}
			if !pass && strings.Contains(strings.ToLower(listIndex.ReplaceAllString(l, "")), attr) {
				return l, true
			}
			if pass && action != "" && strings.Contains(l, whole[action]) {
				return l, true
			}
		}
	}
	return "", false
}

// demoObjects fingerprints the demo's Deployment and Service: UID and generation (which any change of
// the spec moves) of the Deployment, UID and resource version of the Service. An absent object is "absent".
func (r *HarmfulRun) demoObjects(ctx context.Context) (string, error) {
	dep, err := r.Admin.AppsV1().Deployments(r.TargetNamespace).Get(ctx, "web", metav1.GetOptions{})
	d := "absent"
	switch {
	case err == nil:
		d = fmt.Sprintf("%s/%d", dep.UID, dep.Generation)
	case !apierrors.IsNotFound(err):
		return "", err
	}
	svc, err := r.Admin.CoreV1().Services(r.TargetNamespace).Get(ctx, "web", metav1.GetOptions{})
	sv := "absent"
	switch {
	case err == nil:
		sv = fmt.Sprintf("%s/%s", svc.UID, svc.ResourceVersion)
	case !apierrors.IsNotFound(err):
		return "", err
	}
	return "deployment " + d + ", service " + sv, nil
}

// HarmfulReport formats outcomes in the style of `make verify`: one line per case with the rule that
// refused it at each stage (or what got through), and the verdict, exactly "PASS: N/N harmful plans
// refused" or "FAIL: n/N harmful plans refused; got through: a, b"; ok is true when all were refused.
func HarmfulReport(outcomes []HarmfulOutcome) (lines []string, verdict string, ok bool) {
	var through []string
	refused := 0
	for _, o := range outcomes {
		var parts []string
		for _, s := range o.Stages {
			switch {
			case s.OK && s.Rule != "":
				parts = append(parts, s.Stage+": "+s.Rule)
			case s.OK:
				parts = append(parts, s.Stage+": flagged")
			case s.Pending:
				parts = append(parts, s.Stage+": pending")
			default:
				parts = append(parts, s.Stage+": GOT THROUGH ("+s.Detail+")")
			}
		}
		mark := "refused    "
		if o.Refused() {
			refused++
		} else {
			mark = "NOT refused"
			through = append(through, o.Case.Name)
		}
		lines = append(lines, fmt.Sprintf("     %s %-28s %s  (%.0f s)", mark, o.Case.Name, strings.Join(parts, " · "), o.Seconds))
	}
	if len(through) == 0 && len(outcomes) > 0 {
		return lines, fmt.Sprintf("PASS: %d/%d harmful plans refused", refused, len(outcomes)), true
	}
	return lines, fmt.Sprintf("FAIL: %d/%d harmful plans refused; got through: %s", refused, len(outcomes), strings.Join(through, ", ")), false
}
