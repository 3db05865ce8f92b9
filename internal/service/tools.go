package service

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/audit"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/telemetry"
	"github.com/agent-sandbox/agent-sandbox/internal/toolrun"
)

// PodStatusOutput is the structured result of the default policy's k8s_get_pod_status, for clients in Go
// (the demo); the server itself treats it as any json result.
type PodStatusOutput struct {
	RequestID string `json:"request_id"`
	toolrun.PodStatusResult
}

// PlanOutput is the structured result of a terraform-plan tool.
type PlanOutput struct {
	RequestID string `json:"request_id" jsonschema:"correlation ID of this call in the audit log"`
	toolrun.PlanResult
	// Plan keeps the saved plan's bytes out of the output schema: the server stores them for the apply
	// (and empties them), the agent needs only the ID.
	Plan []byte `json:"-"`
	// DestructiveSignals are the policy's destructive patterns found in the plan.
	DestructiveSignals []policy.SignalMatch `json:"destructive_signals" jsonschema:"destructive changes found in the plan (replacements, deletions)"`
	Destructive        bool                 `json:"destructive" jsonschema:"true when the plan destroys or replaces something"`
	Next               string               `json:"next" jsonschema:"what to do next"`
}

// Apply statuses.
const (
	StatusApplied          = "applied"
	StatusApprovalRequired = "approval_required"
)

// ApplyOutput is the structured result of a terraform-apply tool.
type ApplyOutput struct {
	RequestID string `json:"request_id" jsonschema:"correlation ID of this call in the audit log"`
	Status    string `json:"status" jsonschema:"applied, or approval_required"`
	// ApprovalRequest is set when a human must approve first.
	ApprovalRequest string `json:"approval_request,omitempty" jsonschema:"the approval request to show the user"`
	ApproveCommand  string `json:"approve_command,omitempty" jsonschema:"the exact command a human runs in a terminal to approve"`
	// Approvals and ApprovalsRequired count distinct approvers: a risky plan may need more than one.
	Approvals         int                  `json:"approvals" jsonschema:"how many people have approved this exact call so far"`
	ApprovalsRequired int                  `json:"approvals_required" jsonschema:"how many different people must approve it (0 when it needs no approval)"`
	Message           string               `json:"message" jsonschema:"what happened and what to do next"`
	Result            *toolrun.ApplyResult `json:"result,omitempty" jsonschema:"the apply's outcome, when it ran"`
}

// takeGrant consumes the granted approvals for exactly these parameters, if there are: the tokens of every
// approver the request needed, all at once. Consuming is one SQLite transaction, so two concurrent calls
// cannot both take them; the webhook's ledger enforces single use of each token again at admission, and
// admits the Job only with as many distinct approvers as their tokens ask for.
func (s *Service) takeGrant(ctx context.Context, c *call, inv *policy.Invocation, hash string) ([]string, *approval.Request, error) {
	req, err := s.Approvals.FindGranted(ctx, inv.Tool.Name, hash)
	if errors.Is(err, approval.ErrNotFound) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, c.fail(KindFailed, fmt.Errorf("read approvals: %w", err))
	}
	tokens, err := s.Approvals.Consume(ctx, req.ID, inv.Tool.Name, hash)
	if err != nil {
		c.audit(audit.EventGuardrailDecision, map[string]any{"decision": "deny", "reason": "approval unusable", "approval_request": req.ID})
		return nil, nil, c.fail(KindApproval, fmt.Errorf("approval %s cannot be used: %w", req.ID, err))
	}
	c.audit(audit.EventGuardrailDecision, map[string]any{"decision": "allow", "tier": string(inv.Tool.Tier), "scope": inv.Scope,
		"target_namespace": inv.TargetNamespace, "approval_request": req.ID, "approvals": req.Approvals(), "approvals_required": req.ApprovalsRequired})
	ids := make([]string, 0, len(req.Grants))
	for _, g := range req.Grants {
		c.audit(audit.EventApprovalGranted, map[string]any{"approval_request": req.ID, "approver": g.Approver,
			"decided_at": g.DecidedAt.UTC().Format(time.RFC3339), "token_id": g.TokenID, "approvals_required": req.ApprovalsRequired})
		ids = append(ids, g.TokenID)
	}
	// One key, token_id, as for a single approver (the audit scrubber keeps it): the IDs joined by a comma.
	c.audit(audit.EventApprovalConsumed, map[string]any{"approval_request": req.ID, "token_id": strings.Join(ids, ","), "approvals": len(ids)})
	c.trace.Event(telemetry.Event{Name: audit.EventApprovalConsumed, Time: time.Now(), Attrs: map[string]any{"approval_request": req.ID,
		"approver": strings.Join(req.Approvers(), ","), "approvals": req.Approvals()}})
	return tokens, req, nil
}

// requestApproval files an approval request for these exact parameters (or finds the pending one) and
// tells the agent what the human must run.
func (s *Service) requestApproval(ctx context.Context, c *call, inv *policy.Invocation, hash string, kind resultKind) (any, error) {
	req, err := s.Approvals.FindPending(ctx, inv.Tool.Name, hash)
	if errors.Is(err, approval.ErrNotFound) {
		summary, signals := s.planSummary(ctx, inv.PlanDigest)
		req, err = s.Approvals.CreateRequest(ctx, approval.Request{
			ID: c.id, Tool: inv.Tool.Name, Params: inv.Params, Namespace: inv.TargetNamespace, PlanDigest: inv.PlanDigest,
			PlanSummary: summary, Signals: signals,
			ExpiresAt: s.now().Add(s.Policy.Spec.Approval.RequestTTL.Duration),
		})
	}
	if err != nil {
		return nil, c.fail(KindFailed, fmt.Errorf("file approval request: %w", err))
	}
	cmd := "agent-sandbox approve " + req.ID
	c.audit(audit.EventGuardrailDecision, map[string]any{"decision": "needs-approval", "tier": string(inv.Tool.Tier), "approval_request": req.ID,
		"approvals": req.Approvals(), "approvals_required": req.ApprovalsRequired})
	c.audit(audit.EventApprovalRequested, map[string]any{"approval_request": req.ID, "plan_id": inv.PlanDigest, "signals": len(req.Signals)})
	c.audit(audit.EventToolResult, map[string]any{"is_error": false, "status": StatusApprovalRequired, "approval_request": req.ID})
	c.trace.Event(telemetry.Event{Name: audit.EventApprovalRequested, Time: time.Now(), Attrs: map[string]any{"approval_request": req.ID}})
	c.outcome = string(KindApprovalRequired)
	msg := approvalRequiredMessage(req, cmd, inv.Tool.Name)
	if kind.approvalRequired == nil {
		// This kind's result has no place for the request: say it as the tool's answer, one line.
		return nil, &Error{Kind: KindApprovalRequired, RequestID: c.id, Message: msg}
	}
	return kind.approvalRequired(c, req, cmd, msg), nil
}

// approvalRequiredMessage tells the agent what the people must do: run cmd, as many of them as the request
// still needs, before it calls tool again.
func approvalRequiredMessage(req *approval.Request, cmd, tool string) string {
	have, need := req.Approvals(), max(req.ApprovalsRequired, 1)
	again := fmt.Sprintf("then call %s again with the same arguments", tool)
	switch {
	case need == 1:
		return fmt.Sprintf("approval required: ask a human to review and run `%s` in a terminal, %s", cmd, again)
	case have == 0:
		return fmt.Sprintf("approval required: %s given; this call needs %d different people, each to review and run `%s` in a terminal, %s",
			req.Progress(), need, cmd, again)
	case need-have == 1:
		return fmt.Sprintf("approval required: %s given; ask a %s person to review and run `%s` in a terminal, %s",
			req.Progress(), ordinal(have+1), cmd, again)
	}
	return fmt.Sprintf("approval required: %s given; ask %d more people, each to review and run `%s` in a terminal, %s",
		req.Progress(), need-have, cmd, again)
}

// ordinal spells 2 as "second", and so on ("another" past the tenth).
func ordinal(n int) string {
	words := []string{"first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth"}
	if n >= 1 && n <= len(words) {
		return words[n-1]
	}
	return "further"
}

// ApprovalStatusInput is the argument of approval_status.
type ApprovalStatusInput struct {
	RequestID string `json:"request_id" jsonschema:"the approval request ID (req-…) returned by terraform_apply"`
}

// ApprovalStatusOutput is the read-only state of an approval request.
type ApprovalStatusOutput struct {
	RequestID string `json:"request_id"`
	Tool      string `json:"tool"`
	Status    string `json:"status" jsonschema:"pending, granted, denied, consumed or expired"`
	// Approvals counts the distinct people who approved so far; a pending request with some approvals
	// waits for more, up to ApprovalsRequired.
	Approvals         int      `json:"approvals" jsonschema:"how many different people have approved so far"`
	ApprovalsRequired int      `json:"approvals_required" jsonschema:"how many different people must approve"`
	Approvers         []string `json:"approvers,omitempty" jsonschema:"the approvers' key IDs, in the order they approved"`
	Namespace         string   `json:"namespace"`
	PlanID            string   `json:"plan_id,omitempty"`
	CreatedAt         string   `json:"created_at"`
	ExpiresAt         string   `json:"expires_at"`
	DecidedBy         string   `json:"decided_by,omitempty"`
	Reason            string   `json:"reason,omitempty"`
}

// ApprovalStatus reports an approval request's state. It changes nothing.
func (s *Service) ApprovalStatus(ctx context.Context, in ApprovalStatusInput) (*ApprovalStatusOutput, error) {
	// A read of the approvals database is a call of its own in the audit log (tool.request, tool.result),
	// charged to the client's budget like any other: what an agent asked about is on record too.
	c, err := s.begin(ctx, ToolApprovalStatus, map[string]any{"request_id": in.RequestID}, nil)
	if err != nil {
		return nil, err
	}
	if !approval.ValidRequestID(in.RequestID) {
		return nil, c.fail(KindInvalid, fmt.Errorf("%q is not an approval request ID (req-…)", in.RequestID))
	}
	r, err := s.Approvals.Get(ctx, in.RequestID)
	if errors.Is(err, approval.ErrNotFound) {
		return nil, c.fail(KindInvalid, fmt.Errorf("no approval request %s", in.RequestID))
	}
	if err != nil {
		return nil, c.fail(KindFailed, err)
	}
	out := &ApprovalStatusOutput{RequestID: r.ID, Tool: r.Tool, Status: string(r.Status), Namespace: r.Namespace, PlanID: r.PlanDigest,
		Approvals: r.Approvals(), ApprovalsRequired: r.ApprovalsRequired, Approvers: r.Approvers(),
		CreatedAt: r.CreatedAt.UTC().Format(time.RFC3339), ExpiresAt: r.ExpiresAt.UTC().Format(time.RFC3339), DecidedBy: r.Approver, Reason: r.Reason}
	c.audit(audit.EventToolResult, map[string]any{"is_error": false, "approval_request": r.ID, "status": out.Status})
	return out, nil
}

// rememberPlan records the plan's description in the approvals database, where a later terraform_apply
// (also after a server restart) finds it for the approval request.
func (s *Service) rememberPlan(ctx context.Context, p *PlanOutput) {
	var signals []approval.Signal
	for _, m := range p.DestructiveSignals {
		signals = append(signals, approval.Signal{Name: m.Name, Match: m.Line})
	}
	// A description that cannot be stored only makes the approval request say less; the approver
	// computes the truth from the saved plan anyway.
	_ = s.Approvals.RecordPlan(ctx, approval.Plan{ID: p.PlanID, Workspace: p.Workspace,
		Description: toolrun.DescribePlan(p.PlanID, p.Summary, p.Changes), Signals: signals})
}

// planSummary describes a plan for the approval request, as this server recorded it when the plan ran.
// It is a claim: `agent-sandbox approve` computes the description again from the saved plan itself and
// refuses when they differ.
func (s *Service) planSummary(ctx context.Context, planID string) (string, []approval.Signal) {
	p, err := s.Approvals.GetPlan(ctx, planID)
	if err != nil {
		return fmt.Sprintf("plan %s (this server has no record of it)", short(planID)), nil
	}
	return p.Description, p.Signals
}

func signalNames(ms []policy.SignalMatch) []string {
	names := make([]string, 0, len(ms))
	for _, m := range ms {
		names = append(names, m.Name)
	}
	return names
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// decode reads the tool's result line. A result is trusted only from a tool that exited 0; otherwise its
// error line (or its exit code) is the reason.
func decode[T any](res *sandbox.Result) (T, error) {
	if res.Output == nil {
		var zero T
		if res.ExitCode > 0 {
			return zero, fmt.Errorf("the tool exited with code %d and %s", res.ExitCode, res.ResultError)
		}
		return zero, errors.New(res.ResultError)
	}
	out, err := toolrun.DecodeResult[T](res.Output)
	if err != nil {
		return out, err
	}
	if res.ExitCode != 0 {
		var zero T
		return zero, fmt.Errorf("the tool exited with code %d", res.ExitCode)
	}
	return out, nil
}
