package service

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/schema"
	"github.com/agent-sandbox/agent-sandbox/internal/toolrun"
)

// resultKind is what differs between tools once their Job has run: how the result is decoded, checked and
// summarised, and what the agent is told it looks like. The policy names a tool's kind; the rest of a call is
// the same for every tool.
type resultKind struct {
	// outputSchema is the schema of the structured result the agent receives, request_id included.
	outputSchema func(t *policy.Tool) (*schema.Schema, error)
	// decode turns a finished run into the structured result and the fields of its tool.result audit event.
	decode func(ctx context.Context, s *Service, c *call, r *runInfo, res *sandbox.Result) (any, map[string]any, error)
	// approvalRequired, when set, is the structured result that tells the agent people must approve first
	// (req says how many have); without it that answer is a tool error naming the command.
	approvalRequired func(c *call, req *approval.Request, command, message string) any
}

var resultKinds = map[policy.ResultKind]resultKind{
	policy.ResultJSON:           {outputSchema: jsonOutputSchema, decode: decodeJSON},
	policy.ResultText:           {outputSchema: func(*policy.Tool) (*schema.Schema, error) { return schema.For[TextOutput]() }, decode: decodeText},
	policy.ResultTerraformPlan:  {outputSchema: func(*policy.Tool) (*schema.Schema, error) { return schema.For[PlanOutput]() }, decode: decodePlan},
	policy.ResultTerraformApply: {outputSchema: func(*policy.Tool) (*schema.Schema, error) { return schema.For[ApplyOutput]() }, decode: decodeApply, approvalRequired: applyApprovalRequired},
}

// requestIDProperty is the property every structured result carries.
var requestIDProperty = map[string]any{"type": "string", "description": "correlation ID of this call in the audit log"}

// jsonOutputSchema is the policy's schema with the call's request_id added.
func jsonOutputSchema(t *policy.Tool) (*schema.Schema, error) {
	m := t.ResultSchema().Map()
	props, _ := m["properties"].(map[string]any)
	if props == nil {
		props = map[string]any{}
	}
	props[policy.ReservedResultProperty] = requestIDProperty
	m["properties"] = props
	req, _ := m["required"].([]any)
	m["required"] = append([]any{policy.ReservedResultProperty}, req...)
	return schema.FromMap(m)
}

// decodeJSON checks a json result against the tool's bound and schema before the agent sees it: a result
// that does not match what the policy declared is a failed call, not something to pass on.
func decodeJSON(_ context.Context, _ *Service, c *call, r *runInfo, res *sandbox.Result) (any, map[string]any, error) {
	if len(res.Output) > r.tool.Result.MaxBytes {
		return nil, nil, c.fail(KindFailed, fmt.Errorf("%s returned %d bytes, more than its policy's %d", r.tool.Name, len(res.Output), r.tool.Result.MaxBytes))
	}
	out, err := decode[map[string]any](res)
	if err != nil {
		return nil, nil, c.fail(KindFailed, fmt.Errorf("%s failed: %w", r.tool.Name, err))
	}
	if err := r.tool.ResultSchema().Validate(out); err != nil {
		return nil, nil, c.fail(KindFailed, fmt.Errorf("%s returned a result its policy's schema refuses: %w", r.tool.Name, err))
	}
	out[policy.ReservedResultProperty] = c.id
	return out, map[string]any{"bytes": len(res.Output)}, nil
}

// TextOutput is the result of a text tool.
type TextOutput struct {
	RequestID string `json:"request_id" jsonschema:"correlation ID of this call in the audit log"`
	Text      string `json:"text" jsonschema:"the tool's output, cut to the policy's bound"`
	Truncated bool   `json:"truncated" jsonschema:"true when the text was cut"`
}

func decodeText(_ context.Context, _ *Service, c *call, r *runInfo, res *sandbox.Result) (any, map[string]any, error) {
	v, err := decode[struct {
		Text string `json:"text"`
	}](res)
	if err != nil {
		return nil, nil, c.fail(KindFailed, fmt.Errorf("%s failed: %w", r.tool.Name, err))
	}
	out := &TextOutput{RequestID: c.id, Text: v.Text}
	if len(out.Text) > r.tool.Result.MaxBytes {
		out.Text, out.Truncated = cutUTF8(out.Text, r.tool.Result.MaxBytes), true
	}
	return out, map[string]any{"bytes": len(out.Text), "truncated": out.Truncated}, nil
}

func cutUTF8(s string, n int) string {
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// decodePlan stores the saved plan that travels in a terraform-plan result, where the apply Job mounts it
// and the approver reads it, and scans the plan for the policy's destructive signals.
func decodePlan(ctx context.Context, s *Service, c *call, r *runInfo, res *sandbox.Result) (any, map[string]any, error) {
	plan, err := decode[toolrun.PlanResult](res)
	if err != nil {
		return nil, nil, c.fail(KindFailed, fmt.Errorf("terraform plan failed: %w", err))
	}
	// Its bytes must be the plan ID's.
	if toolrun.PlanID(plan.Plan) != plan.PlanID {
		return nil, nil, c.fail(KindFailed, fmt.Errorf("terraform plan returned a saved plan that does not match its plan ID %s", short(plan.PlanID)))
	}
	if err := s.Workspaces.EnsurePlan(ctx, plan.PlanID, plan.Plan); err != nil {
		return nil, nil, c.fail(KindFailed, fmt.Errorf("store the saved plan: %w", err))
	}
	plan.Plan = nil // stored; the agent needs only its ID
	workspace := plan.Workspace
	if w := r.tool.Workspace; w != nil && w.From != "" {
		workspace, _ = r.inv.Params[w.From].(string)
	}
	out := &PlanOutput{RequestID: c.id, PlanResult: plan, DestructiveSignals: s.Policy.DetectSignals(plan.Text)}
	if out.DestructiveSignals == nil {
		out.DestructiveSignals = []policy.SignalMatch{}
	}
	out.Destructive = len(out.DestructiveSignals) > 0 || plan.Summary.Destroy > 0 || plan.Summary.Replace > 0
	switch {
	case plan.NoChanges:
		out.Next = "no changes: nothing to apply"
	case out.Destructive:
		out.Next = fmt.Sprintf("DESTRUCTIVE: review the signals with the user; terraform_apply(workspace=%q, plan_id=%q) will need a human's approval", workspace, plan.PlanID)
	default:
		out.Next = fmt.Sprintf("call terraform_apply(workspace=%q, plan_id=%q); it needs a human's approval", workspace, plan.PlanID)
	}
	if n := plan.ApprovalsRequired; n > 1 && !plan.NoChanges {
		rule := ""
		if len(plan.ApprovalRules) > 0 {
			rule = " (" + plan.ApprovalRules[0].String() + ")"
		}
		out.Next += fmt.Sprintf("; the policy asks %d distinct people to approve this plan%s", n, rule)
	}
	s.rememberPlan(ctx, out)
	return out, map[string]any{"plan_id": plan.PlanID, "summary": plan.Summary, "destructive": out.Destructive,
		"signals": signalNames(out.DestructiveSignals), "approvals_required": max(plan.ApprovalsRequired, 1)}, nil
}

func decodeApply(_ context.Context, _ *Service, c *call, r *runInfo, res *sandbox.Result) (any, map[string]any, error) {
	applied, err := decode[toolrun.ApplyResult](res)
	if err != nil {
		return nil, nil, c.fail(KindFailed, fmt.Errorf("terraform apply failed: %w", err))
	}
	req := r.approval
	if req == nil {
		req = &approval.Request{}
	}
	return &ApplyOutput{RequestID: c.id, Status: StatusApplied, ApprovalRequest: req.ID, Result: &applied,
			Approvals: req.Approvals(), ApprovalsRequired: req.ApprovalsRequired,
			Message: fmt.Sprintf("applied plan %s (approved by %s under %s)", short(r.inv.PlanDigest), strings.Join(req.Approvers(), " and "), req.ID)},
		map[string]any{"applied": applied.Applied, "plan_id": r.inv.PlanDigest, "approval_request": req.ID}, nil
}

func applyApprovalRequired(c *call, req *approval.Request, command, message string) any {
	return &ApplyOutput{RequestID: c.id, Status: StatusApprovalRequired, ApprovalRequest: req.ID, ApproveCommand: command, Message: message,
		Approvals: req.Approvals(), ApprovalsRequired: req.ApprovalsRequired}
}
