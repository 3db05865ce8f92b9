package approver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/cli"
	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/clientconfig"
	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/plandiff"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/toolrun"
)

// verifiedPlan is what approve computed itself from the saved plan a request is bound to. It carries
// everything the approval screen shows (printVerified renders it, -o json encodes it); a check that adds to
// the screen adds a field here.
type verifiedPlan struct {
	changes     toolrun.PlanChanges
	text        string
	signals     []policy.SignalMatch
	description string
	// diff is every changed attribute, before and after, with the risk flags.
	diff *plandiff.Report
	// verdict is what the approver's policy's plan rules say of the plan: refused changes, and how many
	// distinct approvers it needs.
	verdict policy.PlanVerdict
	// unjudged is set when no policy was at hand: no plan rule and no destructive signal was looked for.
	unjudged bool
}

// planSource reads and describes the saved plan a request is bound to. planVerifier is the one used; tests
// give the commands another.
type planSource interface {
	verify(ctx context.Context, planID string, log io.Writer) (*verifiedPlan, error)
}

var _ planSource = (*planVerifier)(nil)

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
	return newVerifiedPlan(ctx, planID, changes, text, v.Policy)
}

// newVerifiedPlan is what the screen shows of a saved plan, from Terraform's own description of it (show
// -json and show): the resource changes, the destructive signals of the approver's policy, and the
// attribute-level diff with its risk flags.
func newVerifiedPlan(ctx context.Context, planID string, changes toolrun.PlanChanges, text string, pol *policy.Compiled) (*verifiedPlan, error) {
	p, err := plandiff.Parse(changes.JSON)
	if err != nil {
		return nil, fmt.Errorf("read the values of the saved plan: %w", err)
	}
	vp := &verifiedPlan{changes: changes, text: text, description: toolrun.DescribePlan(planID, changes.Summary, changes.Changes), diff: plandiff.Diff(p)}
	vp.verdict = policy.PlanVerdict{Refusals: []policy.PlanRuleHit{}, Approvals: 1, ApprovalRules: []policy.PlanRuleHit{}}
	vp.unjudged = pol == nil
	if pol != nil {
		vp.signals = pol.DetectSignals(text)
		vp.verdict = pol.PlanRules.Evaluate(ctx, p)
	}
	return vp, nil
}

// fetch reads ConfigMap tfplan-<plan ID> with the approver's kubeconfig and checks its bytes' SHA-256.
func (v *planVerifier) fetch(ctx context.Context, planID string) ([]byte, error) {
	cfg, err := cli.RESTConfig(v.Kubeconfig, "")
	if err != nil {
		return nil, fmt.Errorf("your kubeconfig (--kubeconfig or $KUBECONFIG): %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	cm, err := cs.CoreV1().ConfigMaps(v.Namespace).Get(ctx, contract.PlanConfigMapPrefix+planID, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read the saved plan %s/%s%s: %w", v.Namespace, contract.PlanConfigMapPrefix, planID[:12], err)
	}
	plan := cm.BinaryData[sandbox.PlanKey]
	sum := sha256.Sum256(plan)
	if got := hex.EncodeToString(sum[:]); got != planID {
		return nil, fmt.Errorf("the saved plan in %s has SHA-256 %s, not the plan ID %s the request names", cm.Name, got[:12], planID[:12])
	}
	return plan, nil
}

// printVerified writes the part of the approval screen computed from the saved plan itself: the risk flags
// first, then the destructive signals of the approver's policy, then the counts and every changed attribute
// of every resource, before and after. It is the one rendering of a verifiedPlan, for approve and for
// approvals show.
func printVerified(w io.Writer, vp *verifiedPlan) {
	fmt.Fprintf(w, "WHAT THE PLAN DOES (computed on this machine from the saved plan, SHA-256 verified):\n")
	if v := vp.verdict; v.Refused() {
		fmt.Fprintf(w, "!! REFUSED BY THE POLICY'S PLAN RULES (%d): no approval can make this plan run; the apply sandbox refuses it too.\n", len(v.Refusals))
		for _, h := range v.Refusals {
			fmt.Fprintf(w, "!! RULE %s  %s: %s\n", safeLine(h.Rule), safeLine(h.Address), safeLine(h.Message))
		}
	}
	if v := vp.verdict; v.Approvals > 1 {
		fmt.Fprintf(w, "!! THIS PLAN NEEDS %d DISTINCT APPROVERS (the policy's two-person rules):\n", v.Approvals)
		for _, h := range v.ApprovalRules {
			fmt.Fprintf(w, "!! RULE %s  %s: %s\n", safeLine(h.Rule), safeLine(h.Address), safeLine(h.Message))
		}
	}
	_ = vp.diff.WriteFlags(w)
	switch {
	case vp.unjudged:
		fmt.Fprintln(w, "!! PLAN RULES NOT CHECKED: no copy of the policy was found (--policy, $AGENT_SANDBOX_POLICY), so neither its")
		fmt.Fprintln(w, "!! plan rules nor its destructive signals were applied here. The apply sandbox still applies the cluster's,")
		fmt.Fprintln(w, "!! and may refuse this plan or ask for more approvers: give --policy to see what it will decide.")
	case len(vp.signals) == 0:
		fmt.Fprintln(w, "  no destructive signal in the plan text")
	default:
		fmt.Fprintf(w, "  DESTRUCTIVE SIGNALS (%d):\n", len(vp.signals))
		lines := make([]signalLine, len(vp.signals))
		for i, m := range vp.signals {
			lines[i] = signalLine{name: m.Name, text: m.Line}
		}
		printSignalLines(w, "  !! ", lines)
	}
	fmt.Fprintln(w)
	_ = vp.diff.WriteChanges(w)
}

// verifiedPlanJSON is the JSON form of the verified part of the screen, in approvals show -o json: the
// diff (summary, flags, resources with their attributes, as package plandiff documents them) and the
// destructive signals; or, when the plan could not be verified, why.
type verifiedPlanJSON struct {
	Verified bool   `json:"verified"`
	Error    string `json:"error,omitempty"`
	// DescriptionMismatch says how the request's description of the plan differs from the plan, when it does.
	DescriptionMismatch string               `json:"description_mismatch,omitempty"`
	Signals             []policy.SignalMatch `json:"signals,omitempty"`
	// PlanRules is what the plan rules of your policy say of the plan.
	PlanRules *policy.PlanVerdict `json:"plan_rules,omitempty"`
	*plandiff.Report
}

func verifiedJSON(vp *verifiedPlan, verr error, mismatch string) *verifiedPlanJSON {
	if verr != nil {
		return &verifiedPlanJSON{Error: verr.Error()}
	}
	out := &verifiedPlanJSON{Verified: true, DescriptionMismatch: mismatch, Signals: vp.signals, PlanRules: &vp.verdict, Report: vp.diff}
	if vp.unjudged {
		out.PlanRules = nil // no policy at hand: no rule was checked, which an empty verdict would hide
	}
	return out
}

// planFlags are the flags with which approve and approvals show reach a saved plan and describe it
// themselves; one definition, since both show the same verified screen.
type planFlags struct {
	PolicyFile       string
	Kubeconfig       string
	SandboxNamespace string
	Terraform        string
	ProviderMirror   string

	policy *policy.Compiled
	// explicit reports whether the policy file was named (flag or environment), not left at its default.
	explicit func() bool
	// source, when set (by tests), replaces the planVerifier.
	source planSource
}

func (f *planFlags) bind(cmd *cobra.Command) {
	f.explicit = func() bool { return cmd.Flags().Changed("policy") || os.Getenv("AGENT_SANDBOX_POLICY") != "" }
	cmd.Flags().StringVar(&f.PolicyFile, "policy", cli.EnvOr("AGENT_SANDBOX_POLICY", approverPolicyDefault(os.Getenv)),
		"your copy of the policy: the plan rules, the sandbox namespace, the destructive signals, and for approve the cluster ID (when --audience is not given) and the token lifetime; a file you name must exist, and without one at the default path the screen says that no plan rule was checked. The default is never a file of the working folder, which an agent may have written [$AGENT_SANDBOX_POLICY, else ~/.config/agent-sandbox/policy.yaml]")
	cmd.Flags().StringVar(&f.Kubeconfig, "kubeconfig", "", "your kubeconfig, to read the saved plan a Terraform request is bound to [$KUBECONFIG, else ~/.kube/config]")
	cmd.Flags().StringVar(&f.SandboxNamespace, "sandbox-namespace", "", "where saved plans are stored (default: the --policy file's spec.sandbox.namespace, else agent-sandbox)")
	cmd.Flags().StringVar(&f.Terraform, "terraform", "terraform", "the terraform binary that describes the saved plan")
	cmd.Flags().StringVar(&f.ProviderMirror, "provider-mirror", "", "filesystem mirror of the kubernetes provider terraform reads the plan with [$AGENT_SANDBOX_TF_PROVIDER_MIRROR]")
}

// complete loads the policy file when there is one (a missing file at the default path is no error: the
// screen then says that no plan rule was checked; a file named by the flag or the environment must exist)
// and fills the defaults that come from it and from the environment.
func (f *planFlags) complete() error {
	if f.PolicyFile != "" && f.policy == nil {
		if p, err := policy.LoadFile(f.PolicyFile, policy.WithoutAdmissionRules()); err == nil {
			f.policy = p
		} else if !errors.Is(err, fs.ErrNotExist) || (f.explicit != nil && f.explicit()) {
			return fmt.Errorf("your copy of the policy (--policy): %w", err)
		}
	}
	if f.SandboxNamespace == "" && f.policy != nil {
		f.SandboxNamespace = f.policy.Spec.Sandbox.Namespace
	}
	if f.SandboxNamespace == "" {
		f.SandboxNamespace = "agent-sandbox"
	}
	if f.ProviderMirror == "" {
		f.ProviderMirror = os.Getenv("AGENT_SANDBOX_TF_PROVIDER_MIRROR")
	}
	return nil
}

func (f *planFlags) plans() planSource {
	if f.source != nil {
		return f.source
	}
	return &planVerifier{Kubeconfig: f.Kubeconfig, Namespace: f.SandboxNamespace, Terraform: f.Terraform, ProviderMirror: f.ProviderMirror, Policy: f.policy}
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

// approverPolicyDefault is the policy file the approver's commands read when none is named: the one `make
// install-client` writes to the user's client folder, or none. Never a path relative to the working folder:
// an approver runs `approve` in whatever folder the terminal is in, often the project the agent works on,
// and a policy planted there would choose the cluster the approval is signed for, its lifetime and the plan
// rules the screen checks.
func approverPolicyDefault(getenv func(string) string) string {
	dir, err := clientconfig.Dir(getenv)
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "policy.yaml")
}
