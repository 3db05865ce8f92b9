package app

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/toolrun"
)

// verifiedPlan is what approve computed itself from the saved plan a request is bound to.
type verifiedPlan struct {
	changes     toolrun.PlanChanges
	text        string
	signals     []policy.SignalMatch
	description string
}

// planVerifier fetches a saved plan with the approver's own credentials and describes it with Terraform
// on the approver's machine. Nothing of it comes from the MCP server: the request supplies only the plan
// ID, which the approval binds anyway.
type planVerifier struct {
	Kubeconfig     string
	Namespace      string
	Terraform      string
	ProviderMirror string
	Policy         *policy.Compiled // the approver's copy, for the destructive signals
}

func (v *planVerifier) verify(ctx context.Context, planID string, log io.Writer) (*verifiedPlan, error) {
	if err := toolrun.ValidatePlanID(planID); err != nil {
		return nil, err
	}
	plan, err := v.fetch(ctx, planID)
	if err != nil {
		return nil, err
	}
	changes, text, err := toolrun.ShowPlan(ctx, plan, toolrun.ShowOptions{Terraform: v.Terraform, ProviderMirror: v.ProviderMirror, Stderr: log})
	if err != nil {
		return nil, fmt.Errorf("describe the saved plan with terraform: %w", err)
	}
	vp := &verifiedPlan{changes: changes, text: text, description: toolrun.DescribePlan(planID, changes.Summary, changes.Changes)}
	if v.Policy != nil {
		vp.signals = v.Policy.DetectSignals(text)
	}
	return vp, nil
}

// fetch reads ConfigMap tfplan-<plan ID> with the approver's kubeconfig and checks its bytes' SHA-256.
func (v *planVerifier) fetch(ctx context.Context, planID string) ([]byte, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = v.Kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("your kubeconfig (--kubeconfig or $KUBECONFIG): %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	cm, err := cs.CoreV1().ConfigMaps(v.Namespace).Get(ctx, sandbox.PlanPrefix+planID, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read the saved plan %s/%s%s: %w", v.Namespace, sandbox.PlanPrefix, planID[:12], err)
	}
	plan := cm.BinaryData[sandbox.PlanKey]
	sum := sha256.Sum256(plan)
	if got := hex.EncodeToString(sum[:]); got != planID {
		return nil, fmt.Errorf("the saved plan in %s has SHA-256 %s, not the plan ID %s the request names", cm.Name, got[:12], planID[:12])
	}
	return plan, nil
}

// printVerified shows the resource-level changes, destructive ones marked, and the destructive signals,
// as computed from the plan itself.
func printVerified(w io.Writer, vp *verifiedPlan) {
	s := vp.changes.Summary
	fmt.Fprintf(w, "WHAT THE PLAN DOES (computed on this machine from the saved plan, SHA-256 verified):\n")
	fmt.Fprintf(w, "  %d to add, %d to change, %d to destroy (%d of them replacements)\n", s.Add, s.Change, s.Destroy, s.Replace)
	for _, ch := range vp.changes.Changes {
		mark := "  "
		if ch.Replace || slices.Contains(ch.Actions, "delete") {
			mark = "!!"
		}
		fmt.Fprintf(w, "  %s %-16s %s", mark, strings.Join(ch.Actions, ","), safeLine(ch.Address))
		if len(ch.ReplacePaths) > 0 {
			fmt.Fprintf(w, "  (replaced because of %s)", safeLine(fmt.Sprint(ch.ReplacePaths)))
		}
		fmt.Fprintln(w)
	}
	if len(vp.signals) == 0 {
		fmt.Fprintln(w, "  no destructive signal in the plan text")
		return
	}
	fmt.Fprintf(w, "  DESTRUCTIVE SIGNALS (%d):\n", len(vp.signals))
	for _, m := range vp.signals {
		fmt.Fprintf(w, "  !! %s: %s\n", safeLine(m.Name), safeLine(m.Line))
	}
}

// claimsMatch compares what the MCP server wrote into the request with what the plan really does.
func claimsMatch(req *approval.Request, vp *verifiedPlan) (bool, string) {
	var diffs []string
	claimed := map[string]bool{}
	for _, s := range req.Signals {
		claimed[s.Name] = true
	}
	real := map[string]bool{}
	for _, m := range vp.signals {
		real[m.Name] = true
	}
	for n := range real {
		if !claimed[n] {
			diffs = append(diffs, "destructive signal "+n+" was left out")
		}
	}
	for n := range claimed {
		if !real[n] {
			diffs = append(diffs, "destructive signal "+n+" is not in the plan")
		}
	}
	slices.Sort(diffs)
	if strings.TrimSpace(req.PlanSummary) != strings.TrimSpace(vp.description) {
		diffs = append([]string{"the changes differ"}, diffs...)
	}
	return len(diffs) == 0, strings.Join(diffs, "; ")
}
