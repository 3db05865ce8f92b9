package approver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/cli"
	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/toolrun"
	"github.com/agent-sandbox/agent-sandbox/test/harness"
)

// testPlanID is the plan digest of the requests below; the plans come from fixedPlan, not from a cluster.
var testPlanID = strings.Repeat("ab", 32)

// fixedPlan is a planSource that returns one plan (or one error), as if read from the cluster and described
// by terraform: the real verifier needs both, and the tests here are about what is shown.
type fixedPlan struct {
	vp  *verifiedPlan
	err error
}

func (f fixedPlan) verify(context.Context, string, io.Writer) (*verifiedPlan, error) {
	return f.vp, f.err
}

// verifiedFixture is what newVerifiedPlan makes of a `terraform show -json` fixture (no plan text, no policy).
func verifiedFixture(t *testing.T, name string) *verifiedPlan {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("../../../../internal/plandiff/testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	changes, err := toolrun.ParsePlanJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	vp, err := newVerifiedPlan(context.Background(), testPlanID, changes, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	return vp
}

// planRequest files a request bound to testPlanID whose description is the plan's own (honest).
func planRequest(t *testing.T, e *approvalEnv, vp *verifiedPlan) *approval.Request {
	return e.createRequest(t, func(r *approval.Request) {
		r.PlanDigest = testPlanID
		r.PlanSummary = vp.description
		r.Signals = nil
	})
}

// approveWith runs approve of r on a pseudo-terminal with plans as its plan source.
func approveWith(t *testing.T, e *approvalEnv, r *approval.Request, plans planSource) *harness.TestTerminal {
	return harness.StartTestTerminal(t, func(tty *os.File) int {
		o := &approveOptions{storeFlags: storeFlags{DBPath: e.db}, ID: r.ID, KeyPath: e.keyPath, Audience: approveAudience,
			TTL: 10 * time.Minute, now: time.Now, plan: planFlags{source: plans}}
		err := o.Run(context.Background(), cli.IO{In: tty, Out: tty, ErrOut: tty}, tty)
		var ee cli.ExitError
		switch {
		case err == nil:
			return 0
		case errors.As(err, &ee):
			return ee.Code
		}
		fmt.Fprintf(tty, "error: %v\n", err)
		return 1
	})
}

// TestApproveShowsTheIncidentRiskFirst: the incident's change (kubernetes_deployment.web made privileged,
// root, with the node's kubelet directory mounted and its command changed), which the old screen showed as
// one "update" line, is flagged at the top of the verified section, on the first page below the request,
// with every attribute after; approve asks to confirm only after the last page.
func TestApproveShowsTheIncidentRiskFirst(t *testing.T) {
	e := newApprovalEnv(t)
	vp := verifiedFixture(t, "plan-incident.json")
	r := planRequest(t, e, vp)
	s := approveWith(t, e, r, fixedPlan{vp: vp})
	s.Expect("-- more: line ")
	first := s.Output()
	if strings.Contains(first, `or "yes": `) {
		t.Fatalf("approve asked before the last page:\n%s", first)
	}
	pod := "spec[0].template[0].spec[0]."
	for _, want := range []string{
		"WHAT THE PLAN DOES",
		"!! RISK FLAGS (7): PRIVILEGED, HOST_PATH, ALLOW_PRIVILEGE_ESCALATION, RUN_AS_ROOT, RUN_AS_NON_ROOT_OFF, COMMAND, VOLUME_MOUNT",
		"!! RISK PRIVILEGED  kubernetes_deployment.web  " + pod + "container[0].security_context[0].privileged: false -> true",
		"!! RISK HOST_PATH  kubernetes_deployment.web  " + pod + `volume[1].host_path: (none) -> [{path = "/var/lib/kubelet", type = "Directory"}]`,
		"!! RISK RUN_AS_ROOT  kubernetes_deployment.web  " + pod + "container[0].security_context[0].run_as_user: 65532 -> 0",
	} {
		if !strings.Contains(first, want) {
			t.Errorf("the first page lacks %q:\n%s", want, first)
		}
	}
	s.Send("\n")
	s.Expect(`or "yes": `)
	shown := s.Output()
	// No copy of the policy here: the screen says that no plan rule or signal was checked.
	order := []string{"APPROVAL REQUEST", "Plan digest", "WHAT THE PLAN DOES", "!! RISK PRIVILEGED", "!! PLAN RULES NOT CHECKED",
		"0 to add, 1 to change, 0 to destroy", "!! update           kubernetes_deployment.web",
		"!! ~ " + pod + "container[0].security_context[0].privileged: false -> true",
		"!! + " + pod + `volume[1].host_path[0].path: (none) -> "/var/lib/kubelet"`, `or "yes": `}
	rest := shown
	for _, want := range order {
		i := strings.Index(rest, want)
		if i < 0 {
			t.Fatalf("the screen does not show %q after %q:\n%s", want, shown[:len(shown)-len(rest)], shown)
		}
		rest = rest[i+len(want):]
	}
	s.Send("no\n")
	if code := s.Wait(); code != 1 {
		t.Fatalf("exit %d", code)
	}
	s.Expect("confirmation did not match")
	if st := e.status(t, r.ID); st != approval.StatusPending {
		t.Errorf("request is %s, want pending", st)
	}
}

// TestApprovePagesALongPlanWithoutCuts: a plan of 30 resources (and the request's own long summary of it)
// is shown a page at a time, every line of it, with the flag of its last resource at the top of the
// verified section; the question comes after the last page.
func TestApprovePagesALongPlanWithoutCuts(t *testing.T) {
	e := newApprovalEnv(t)
	vp := verifiedFixture(t, "plan-long.json")
	r := planRequest(t, e, vp)
	s := approveWith(t, e, r, fixedPlan{vp: vp})
	prompts := 0
	for {
		s.Expect("-- more: line ")
		if n := strings.Count(s.Output(), "-- more: line "); n > prompts {
			prompts = n
			if strings.Contains(s.Output(), `or "yes": `) {
				t.Fatalf("approve asked before the last page:\n%s", s.Output())
			}
			s.Send("\n")
		}
		time.Sleep(20 * time.Millisecond)
		if strings.Contains(s.Output(), `or "yes": `) {
			break
		}
	}
	var text strings.Builder
	printVerified(&text, vp)
	shown := strings.ReplaceAll(s.Output(), "\r\n", "\n")
	for _, line := range strings.Split(strings.TrimSpace(text.String()), "\n") {
		if !strings.Contains(shown, line+"\n") {
			t.Errorf("the screen lacks the line %q", line)
		}
	}
	if prompts < 8 {
		t.Errorf("%d pages, want more than 8 for %d lines", prompts+1, strings.Count(text.String(), "\n"))
	}
	top := "WHAT THE PLAN DOES (computed on this machine from the saved plan, SHA-256 verified):\n!! RISK FLAGS (1): IMAGE\n"
	if i, j := strings.Index(shown, top), strings.Index(shown, "create           kubernetes_config_map.page[0]"); i < 0 || i > j {
		t.Errorf("the risk flag is not at the top of the verified section (at %d, the first resource at %d):\n%s", i, j, shown[:min(len(shown), 4000)])
	}
	s.Send("no\n")
	if code := s.Wait(); code != 1 {
		t.Fatalf("exit %d", code)
	}
}

// TestApproveRefusesAFalseDescriptionAndShowsThePlan: the claimsMatch refusal stays: exit 4, nothing asked,
// and the verified plan (flags first) is on the screen.
func TestApproveRefusesAFalseDescriptionAndShowsThePlan(t *testing.T) {
	e := newApprovalEnv(t)
	vp := verifiedFixture(t, "plan-incident.json")
	r := e.createRequest(t, func(r *approval.Request) {
		r.PlanDigest = testPlanID
		r.PlanSummary = toolrun.DescribePlan(testPlanID, toolrun.PlanSummary{Add: 1}, []toolrun.ResourceChange{{Address: "kubernetes_config_map.notes", Actions: []string{"create"}}})
		r.Signals = nil
	})
	s := approveWith(t, e, r, fixedPlan{vp: vp})
	if code := s.Wait(); code != cli.ExitTampered {
		t.Fatalf("exit %d:\n%s", code, s.Output())
	}
	s.Expect("deny " + r.ID)
	out := s.Output()
	for _, want := range []string{"!! RISK PRIVILEGED", "THE REQUEST'S DESCRIPTION OF THIS PLAN IS FALSE: the changes differ"} {
		if !strings.Contains(out, want) {
			t.Errorf("approve did not show %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, `or "yes": `) || strings.Contains(out, "-- more:") {
		t.Errorf("approve asked or paged a request it refuses:\n%s", out)
	}
}

// TestApprovalsShowVerifiedPlan: approvals show prints the same verified screen as approve (whole, not
// paged), -o json carries it, and a plan that cannot be verified or a false description is said and fails.
func TestApprovalsShowVerifiedPlan(t *testing.T) {
	e := newApprovalEnv(t)
	vp := verifiedFixture(t, "plan-incident.json")
	r := planRequest(t, e, vp)
	show := func(plans planSource, output string) (string, error) {
		var out bytes.Buffer
		o := &approvalsShowOptions{storeFlags: storeFlags{DBPath: e.db}, OutputFlag: cli.OutputFlag{Output: output}, ID: r.ID,
			now: time.Now, plan: planFlags{source: plans}}
		err := o.Run(context.Background(), cli.IO{Out: &out, ErrOut: io.Discard})
		return out.String(), err
	}

	out, err := show(fixedPlan{vp: vp}, "text")
	if err != nil {
		t.Fatal(err)
	}
	var verified strings.Builder
	printVerified(&verified, vp)
	if !strings.Contains(out, r.ID) || !strings.Contains(out, verified.String()) || strings.Contains(out, "-- more") {
		t.Errorf("show does not print the request and the whole verified screen:\n%s", out)
	}

	out, err = show(fixedPlan{vp: vp}, "json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		ID           string `json:"id"`
		VerifiedPlan struct {
			Verified  bool `json:"verified"`
			Summary   struct{ Change int }
			Flags     []struct{ Rule, Address, Path, Before, After string }
			Resources []struct {
				Address    string
				Attributes []struct{ Path, Before, After string }
			}
		} `json:"verified_plan"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if v := doc.VerifiedPlan; doc.ID != r.ID || !v.Verified || v.Summary.Change != 1 || len(v.Flags) != 7 || v.Flags[0].Rule != "privileged" ||
		v.Flags[0].Before != "false" || v.Flags[0].After != "true" || len(v.Resources) != 1 || len(v.Resources[0].Attributes) != len(vp.diff.Resources[0].Attributes) {
		t.Errorf("show -o json: %+v", doc)
	}

	cannot := errors.New("read the saved plan agent-sandbox/tfplan-abababababab: connection refused\x1b[2J")
	out, err = show(fixedPlan{err: cannot}, "text")
	if err == nil || errors.As(err, new(cli.ExitError)) || !errors.Is(err, cannot) {
		t.Errorf("show of an unverifiable plan: err %v, want the failure", err)
	}
	for _, want := range []string{r.ID, "Plan digest", "!! THE SAVED PLAN COULD NOT BE VERIFIED", `connection refused\u001b[2J`} {
		if !strings.Contains(out, want) {
			t.Errorf("show of an unverifiable plan lacks %q:\n%s", want, out)
		}
	}
	out, err = show(fixedPlan{err: cannot}, "json")
	if err == nil || !strings.Contains(out, `"verified": false`) || !strings.Contains(out, `"error": "read the saved plan`) {
		t.Errorf("show -o json of an unverifiable plan: err %v\n%s", err, out)
	}

	lying := e.createRequest(t, func(r *approval.Request) { r.PlanDigest = testPlanID; r.Signals = nil })
	var buf bytes.Buffer
	o := &approvalsShowOptions{storeFlags: storeFlags{DBPath: e.db}, OutputFlag: cli.OutputFlag{Output: "text"}, ID: lying.ID, now: time.Now, plan: planFlags{source: fixedPlan{vp: vp}}}
	var ee cli.ExitError
	if err := o.Run(context.Background(), cli.IO{Out: &buf}); !errors.As(err, &ee) || ee.Code != cli.ExitTampered || !strings.Contains(buf.String(), "IS FALSE") {
		t.Errorf("show of a request that describes its plan falsely: %v\n%s", err, buf.String())
	}
}

// TestApprovalsShowSaysWhenThePlanCannotBeVerified, through the command line and the real verifier: no
// cluster to read the plan from, so the request is shown, the failure said, and the exit status is 1.
func TestApprovalsShowSaysWhenThePlanCannotBeVerified(t *testing.T) {
	e := newApprovalEnv(t)
	r := e.createRequest(t, func(r *approval.Request) { r.PlanDigest = testPlanID })
	code, out, stderr := runApprovalCLI(t, bytes.NewReader(nil), "approvals", "show", r.ID, "--db", e.db, "--kubeconfig", filepath.Join(e.dir, "no-such-kubeconfig"))
	if code != 1 || !strings.Contains(out, r.ID) || !strings.Contains(out, "!! THE SAVED PLAN COULD NOT BE VERIFIED") ||
		!strings.Contains(stderr, "could not be verified") {
		t.Errorf("exit %d\nstdout:\n%s\nstderr: %s", code, out, stderr)
	}
}

// TestPlanFlagsAreShared: approve and approvals show reach the saved plan with one definition of the flags.
func TestPlanFlagsAreShared(t *testing.T) {
	approve := NewApproveCommand(cli.IO{})
	var show *pflag.FlagSet
	for _, c := range NewApprovalsCommand(cli.IO{}).Commands() {
		if c.Name() == "show" {
			show = c.Flags()
		}
	}
	for _, name := range []string{"kubeconfig", "sandbox-namespace", "terraform", "provider-mirror", "policy"} {
		a, s := approve.Flags().Lookup(name), show.Lookup(name)
		if a == nil || s == nil || a.Usage != s.Usage || a.DefValue != s.DefValue {
			t.Errorf("--%s: approve %+v, approvals show %+v", name, a, s)
		}
	}
}

// TestHelpSaysWhatIsShown: both commands' help says that the risk flags and every changed attribute are
// shown, and approve's that it pages.
func TestHelpSaysWhatIsShown(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"approve", "--help"}, []string{"!! RISK", "every attribute that differs", "before ->", "(known after", "(sensitive)", "non-ASCII", "waits for Enter", "Nothing is left out"}},
		{[]string{"approvals", "show", "--help"}, []string{"!! RISK", "every attribute that differs", "exits 1", "verified_plan", "--kubeconfig", "--provider-mirror"}},
	} {
		code, out, _ := testMain.Capture(tc.args...)
		if code != 0 {
			t.Errorf("%v: exit %d", tc.args, code)
		}
		flat := strings.Join(strings.Fields(out), " ")
		for _, w := range tc.want {
			if !strings.Contains(flat, w) {
				t.Errorf("%v does not say %q", tc.args, w)
			}
		}
	}
}

// TestRequestHeaderMarksLookAlikes: what the approval binds (tool, namespace, parameters) is shown in ASCII
// with its non-ASCII characters named, so that a Cyrillic "е" cannot pass for an "e".
func TestRequestHeaderMarksLookAlikes(t *testing.T) {
	e := newApprovalEnv(t)
	r := e.createRequest(t, func(r *approval.Request) {
		r.Namespace = "d\u0435mo"
		r.Params["dir"] = "infra/pr\u043ed"
		r.Params["d\u0456r"] = "x"
	})
	code, out, _ := runApprovalCLI(t, bytes.NewReader(nil), "approvals", "show", r.ID, "--db", e.db)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{
		`d\u0435mo [non-ASCII: U+0435 CYRILLIC SMALL LETTER IE]`,
		`"infra/pr\u043ed" [non-ASCII: U+043E CYRILLIC SMALL LETTER O]`,
		`d\u0456r [non-ASCII: U+0456 CYRILLIC SMALL LETTER BYELORUSSIAN-UKRAINIAN I]`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("show lacks %s:\n%s", want, out)
		}
	}
}

// TestApproveRefusesWhatThePlanRulesRefuse: with the shipped policy, the incident's plan is refused by its
// plan rules on the approver's own machine: the screen names each rule and resource at the top and approve
// signs nothing (exit 4) and never asks; a plan that a two-person rule covers says how many approvers it
// needs.
func TestApproveRefusesWhatThePlanRulesRefuse(t *testing.T) {
	pol, err := policy.LoadFile("../../../../policy/policy.yaml", policy.WithoutAdmissionRules())
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("../../../../internal/plandiff/testdata/plan-incident.json")
	if err != nil {
		t.Fatal(err)
	}
	changes, err := toolrun.ParsePlanJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	vp, err := newVerifiedPlan(context.Background(), testPlanID, changes, "", pol)
	if err != nil {
		t.Fatal(err)
	}
	if !vp.verdict.Refused() {
		t.Fatalf("the shipped rules admit the incident: %+v", vp.verdict)
	}
	e := newApprovalEnv(t)
	r := planRequest(t, e, vp)
	s := approveWith(t, e, r, fixedPlan{vp: vp})
	// The terminal is read while approve runs: wait for its last line, then for its exit.
	s.Expect("--reason 'refused by the policy's plan rules'")
	if code := s.Wait(); code != cli.ExitTampered {
		t.Fatalf("exit %d, want %d:\n%s", code, cli.ExitTampered, s.Output())
	}
	out := s.Output()
	for _, want := range []string{"!! REFUSED BY THE POLICY'S PLAN RULES", "!! RULE plan-no-privileged  kubernetes_deployment.web",
		"!! RULE plan-no-host-path  kubernetes_deployment.web", "!! Refusing to sign: plan refused by rule plan-no-privileged"} {
		if !strings.Contains(out, want) {
			t.Errorf("the screen lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, `or "yes": `) || strings.Index(out, "REFUSED BY THE POLICY") > strings.Index(out, "!! RISK FLAGS") {
		t.Errorf("approve asked, or put the refusal below the flags:\n%s", out)
	}
	if st := e.status(t, r.ID); st != approval.StatusPending {
		t.Errorf("request is %s, want pending", st)
	}
}

// TestApproverPolicyCopy: a policy file named by --policy must exist — it used to
// be ignored, like the default path, and the plan then judged by no rule — and a screen made without any
// copy of the policy says that its plan rules and destructive signals were not checked, in text and JSON.
func TestApproverPolicyCopy(t *testing.T) {
	e := newApprovalEnv(t)
	r := e.createRequest(t, nil)
	missing := filepath.Join(t.TempDir(), "policy.yaml")
	s := startPTY(t, "approve", r.ID, "--db", e.db, "--key", e.keyPath, "--audience", approveAudience, "--policy", missing)
	if code := s.Wait(); code == 0 || !strings.Contains(s.Output(), missing) || strings.Contains(s.Output(), "APPROVAL REQUEST") {
		t.Errorf("approve --policy with a missing file: exit %d, %q; want it refused before the screen, naming the file", code, s.Output())
	}

	data, err := os.ReadFile("../../../../internal/plandiff/testdata/plan-incident.json")
	if err != nil {
		t.Fatal(err)
	}
	changes, err := toolrun.ParsePlanJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	shipped, err := policy.LoadFile("../../../../policy/policy.yaml", policy.WithoutAdmissionRules())
	if err != nil {
		t.Fatal(err)
	}
	for _, pol := range []*policy.Compiled{nil, shipped} {
		vp, err := newVerifiedPlan(context.Background(), testPlanID, changes, "", pol)
		if err != nil {
			t.Fatal(err)
		}
		var text strings.Builder
		printVerified(&text, vp)
		js := verifiedJSON(vp, nil, "")
		unchecked := strings.Contains(text.String(), "!! PLAN RULES NOT CHECKED")
		if unchecked != (pol == nil) || (js.PlanRules == nil) != (pol == nil) {
			t.Errorf("policy %v: the screen says not checked: %v, the JSON has plan_rules: %v", pol != nil, unchecked, js.PlanRules != nil)
		}
		if pol != nil && !strings.Contains(text.String(), "!! REFUSED BY THE POLICY'S PLAN RULES") {
			t.Errorf("the incident judged by the shipped policy is not refused on the screen:\n%s", text.String())
		}
	}
}

// TestSignalTextsCannotBuryTheVerifiedPart: text in a plan (a ConfigMap's data) matches a destructive
// signal as well as a real deletion does, and the request's signal texts are whatever the MCP server filed.
// Neither may push the part of the screen this program computes out of sight: with the incident plan, 2,003
// forged signal texts (three padded to wrap the terminal into a forged "Risk flags: none") and 2,200 real
// matches of one signal in the plan text, the first risk flag must still stand on the first page, no forged
// text anywhere, and the plan's own matches be shown three at a time with a count of the rest.
func TestSignalTextsCannotBuryTheVerifiedPart(t *testing.T) {
	e := newApprovalEnv(t)
	vp := verifiedFixture(t, "plan-incident.json")
	vp.unjudged = false // as if with a policy whose signal the plan text matches 2,200 times
	for i := range 2200 {
		vp.signals = append(vp.signals, policy.SignalMatch{Name: "will-be-destroyed", Line: fmt.Sprintf("  key%d = \"row %d will be destroyed; Risk flags: none\"", i, i)})
	}
	forged := "old ConfigMap, expected" + strings.Repeat(" ", 40) + "WHAT THE PLAN DOES (computed on this machine): Risk flags: none."
	var sigs []approval.Signal
	for i := range 2003 {
		text := "FORGED repeated line"
		if i < 3 {
			text = "FORGED " + forged
		}
		sigs = append(sigs, approval.Signal{Name: "will-be-destroyed", Match: text})
	}
	r := e.createRequest(t, func(r *approval.Request) {
		r.PlanDigest, r.PlanSummary, r.Signals = testPlanID, vp.description, sigs
	})
	o := &approveOptions{storeFlags: storeFlags{DBPath: e.db}, ID: r.ID, KeyPath: e.keyPath, Audience: approveAudience,
		TTL: 10 * time.Minute, now: time.Now, plan: planFlags{source: fixedPlan{vp: vp}}}
	store, err := o.openExisting(o.now)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	req, err := store.Get(context.Background(), r.ID)
	if err != nil {
		t.Fatal(err)
	}
	_, screen, _, err := o.describe(context.Background(), io.Discard, req)
	if err != nil {
		t.Fatalf("describe refused an honest description: %v", err)
	}
	if strings.Contains(screen, "FORGED") {
		t.Errorf("the screen shows the MCP server's signal texts:\n%s", screen)
	}
	lines := strings.Split(screen, "\n")
	first := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "!! RISK PRIVILEGED") })
	if first < 0 || first >= 40 {
		t.Errorf("the first risk flag is on line %d of %d, not on the first page:\n%s", first+1, len(lines), strings.Join(lines[:min(60, len(lines))], "\n"))
	}
	if n := strings.Count(screen, "!! will-be-destroyed: "); n != 4 {
		t.Errorf("the plan's 2,200 matches of one signal take %d lines, want 3 and a count:\n%s", n, screen)
	}
	if !strings.Contains(screen, "!! will-be-destroyed: and 2197 more lines (-o json lists them all)") {
		t.Errorf("the screen does not count the matches it does not show:\n%s", screen)
	}
}

// TestRequestSignalsWithoutAPlanAreCut: a request bound to no plan has only the MCP server's signals to show;
// they are shown three per signal, each cut to a line that cannot wrap into a forged one.
func TestRequestSignalsWithoutAPlanAreCut(t *testing.T) {
	r := &approval.Request{ID: "req-1", Tool: "delete_thing", Status: approval.StatusPending}
	for range 10 {
		r.Signals = append(r.Signals, approval.Signal{Name: "resource_delete", Match: strings.Repeat("x", 500)})
	}
	r.Signals = append(r.Signals, approval.Signal{Name: "drop_table", Match: "DROP TABLE users"})
	var b strings.Builder
	printRequest(&b, r, time.Now())
	out := b.String()
	for _, want := range []string{
		"DESTRUCTIVE SIGNALS (11) as the MCP server reported them:",
		"  !! resource_delete: " + strings.Repeat("x", 160) + "... (340 more characters)\n",
		"  !! drop_table: DROP TABLE users\n",
		"  !! resource_delete: and 7 more lines (-o json lists them all)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the request lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "!! resource_delete: xxx"); n != 3 {
		t.Errorf("%d lines of resource_delete shown, want 3:\n%s", n, out)
	}
	// Names are text too: 50 different ones, one of them long, take ten lines and a count.
	r.Signals = nil
	for i := range 50 {
		r.Signals = append(r.Signals, approval.Signal{Name: fmt.Sprintf("s%d%s", i, strings.Repeat("n", 300*(i%2))), Match: "m"})
	}
	b.Reset()
	printRequest(&b, r, time.Now())
	out = b.String()
	if n := strings.Count(out, "  !! "); n != 11 || !strings.Contains(out, "  !! and 40 more lines of 40 other signals") || strings.Contains(out, strings.Repeat("n", 161)) {
		t.Errorf("50 signal names take %d lines, want 10 cut to 160 characters and a count:\n%s", n, out)
	}
}
