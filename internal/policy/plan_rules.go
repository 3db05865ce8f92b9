package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/cel"
	"github.com/agent-sandbox/agent-sandbox/internal/plandiff"
)

// Reserved placeholders of argv templates: not parameters, but values the policy itself supplies.
const (
	// PlaceholderPlanRules is the policy's plan rules as JSON (PlanRuleSet.JSON), so that a sandbox enforces
	// exactly the rules of the policy the webhook admits its Job by.
	PlaceholderPlanRules = "plan_rules"
	// PlaceholderApprovers is the comma-separated, sorted key IDs of the distinct approvers whose valid
	// tokens the Job was admitted with (Invocation.SetApprovers); the element is left out when there are none.
	PlaceholderApprovers = "approvers"
)

// MaxApprovals bounds a two-person rule's approvals.
const MaxApprovals = 5

// PlanRuleSet is a compiled list of plan rules.
type PlanRuleSet struct {
	rules []PlanRule
	prog  *cel.PlanProgram
}

// CompilePlanRules compiles plan rules; path locates them in their document ("spec.planRules") for errors.
func CompilePlanRules(rules []PlanRule, path string) (*PlanRuleSet, error) {
	var errs []string
	crs := make([]cel.Rule, len(rules))
	for i, r := range rules {
		p := fmt.Sprintf("%s[%d]", path, i)
		crs[i] = cel.Rule{Path: p, Name: r.Name, Expression: r.Expression, Message: r.Message}
		if r.Approvals < 0 || r.Approvals > MaxApprovals {
			errs = append(errs, fmt.Sprintf("%s.approvals: must be between 0 and %d", p, MaxApprovals))
		}
		if strings.TrimSpace(r.Message) == "" {
			errs = append(errs, p+".message: must not be empty")
		}
	}
	prog, err := cel.CompilePlan(crs)
	if err != nil {
		var ce *cel.CompileError
		if !errors.As(err, &ce) {
			return nil, err
		}
		for _, fe := range ce.Errs {
			errs = append(errs, fe.Error())
		}
	}
	if len(errs) > 0 {
		return nil, &Error{Problems: errs}
	}
	return &PlanRuleSet{rules: slices.Clone(rules), prog: prog}, nil
}

// ParsePlanRules reads the JSON that the {{plan_rules}} placeholder renders and compiles it.
func ParsePlanRules(data string) (*PlanRuleSet, error) {
	var rules []PlanRule
	dec := json.NewDecoder(strings.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rules); err != nil {
		return nil, fmt.Errorf("plan rules: %w", err)
	}
	return CompilePlanRules(rules, "planRules")
}

// Rules returns the rules.
func (s *PlanRuleSet) Rules() []PlanRule { return slices.Clone(s.rules) }

// JSON is the rules as one JSON array, the form ParsePlanRules reads ("[]" for a nil set).
func (s *PlanRuleSet) JSON() string {
	var rules []PlanRule
	if s != nil {
		rules = s.rules
	}
	if rules == nil {
		rules = []PlanRule{}
	}
	b, err := json.Marshal(rules)
	if err != nil {
		panic(err) // strings and ints only
	}
	return string(b)
}

// PlanRuleHit is one rule that a resource change breaks.
type PlanRuleHit struct {
	Rule    string `json:"rule"`
	Address string `json:"address"`
	Message string `json:"message"`
	// Approvals is the rule's approvals for a two-person rule, 0 for a refusal.
	Approvals int `json:"approvals,omitempty"`
}

// String is "rule at address: message".
func (h PlanRuleHit) String() string { return h.Rule + " at " + h.Address + ": " + h.Message }

// PlanVerdict is what the plan rules say of a plan.
type PlanVerdict struct {
	// Refusals are the changes refused: a plan with any cannot be applied, whatever approval it carries.
	Refusals []PlanRuleHit `json:"refusals"`
	// Approvals is how many distinct approvers the plan needs: 1, or the most any two-person rule asks.
	Approvals int `json:"approvals"`
	// ApprovalRules are the two-person rules that raised Approvals.
	ApprovalRules []PlanRuleHit `json:"approval_rules"`
}

// Refused reports whether the plan is refused.
func (v PlanVerdict) Refused() bool { return len(v.Refusals) > 0 }

// Error is the refusal on one line: "plan refused by rule R at ADDRESS: message" and a count of more.
func (v PlanVerdict) Error() string {
	if !v.Refused() {
		return ""
	}
	h := v.Refusals[0]
	msg := fmt.Sprintf("plan refused by rule %s at %s: %s", h.Rule, h.Address, h.Message)
	if n := len(v.Refusals) - 1; n > 0 {
		names := []string{}
		for _, o := range v.Refusals[1:] {
			if !slices.Contains(names, o.Rule) {
				names = append(names, o.Rule)
			}
		}
		msg += fmt.Sprintf(" (and %d more: %s)", n, strings.Join(names, ", "))
	}
	return msg
}

// Evaluate judges every resource change of a plan that does something (a no-op changes nothing: provider
// 1.13.4 plans an existing Deployment whose nested value turns unknown as one, and nothing is applied).
// A nil set judges nothing and needs one approver.
func (s *PlanRuleSet) Evaluate(ctx context.Context, p *plandiff.Plan) PlanVerdict {
	v := PlanVerdict{Refusals: []PlanRuleHit{}, Approvals: 1, ApprovalRules: []PlanRuleHit{}}
	if s == nil || p == nil {
		return v
	}
	byName := make(map[string]PlanRule, len(s.rules))
	for _, r := range s.rules {
		byName[r.Name] = r
	}
	for i := range p.Changes {
		c := &p.Changes[i]
		if c.IsNoOp() {
			continue
		}
		for _, viol := range s.prog.Evaluate(ctx, plandiff.View(c)) {
			r := byName[viol.Rule]
			hit := PlanRuleHit{Rule: viol.Rule, Address: c.Address, Message: viol.Message}
			// A two-person rule that could not be evaluated refuses: it cannot say how many approvers.
			if r.Approvals >= 2 && !viol.Unevaluated {
				hit.Approvals = r.Approvals
				v.ApprovalRules = append(v.ApprovalRules, hit)
				v.Approvals = max(v.Approvals, r.Approvals)
				continue
			}
			v.Refusals = append(v.Refusals, hit)
		}
	}
	return v
}

// EvaluateShowJSON parses `terraform show -json` and evaluates it.
func (s *PlanRuleSet) EvaluateShowJSON(ctx context.Context, showJSON []byte) (PlanVerdict, error) {
	p, err := plandiff.Parse(showJSON)
	if err != nil {
		return PlanVerdict{}, err
	}
	return s.Evaluate(ctx, p), nil
}
