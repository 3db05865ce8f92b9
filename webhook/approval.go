package webhook

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/rules"
)

// checkApproval verifies the approval tokens of a call (the value of contract.AnnotationApprovalToken: one
// token, or several approvers' joined) and, unless the request is a dry run, consumes them. The tokens must
// be signed by as many distinct approvers as they say the call needs, and every token's ID is recorded in the
// shared ledger before the Job is admitted: a second Job with any of the tokens, even one racing this one
// through another replica, is refused. It returns the IDs of the tokens.
func (c *Checker) checkApproval(ctx context.Context, p *policy.Compiled, inv *policy.Invocation, annotation string, dryRun bool) ([]string, []string, error) {
	if annotation == "" {
		return nil, nil, deny(rules.ApprovalRequired, "tool %s needs a human's signed approval in annotation %s; the agent's request waits for `agent-sandbox approve`", inv.Tool.Name, contract.AnnotationApprovalToken)
	}
	keys := c.keys.Load()
	if keys == nil || keys.Len() == 0 {
		return nil, nil, deny(rules.ApprovalKeys, "no approver public keys are configured, so no approval can be accepted")
	}
	hash, err := approval.ParamsHash(inv.Tool.Name, inv.Params)
	if err != nil {
		return nil, nil, deny(rules.InvalidParameters, "%v", err)
	}
	want := approval.Expectation{Tool: inv.Tool.Name, ParamsHash: hash, Namespace: inv.TargetNamespace, PlanDigest: inv.PlanDigest}
	v := approval.NewVerifier(keys, p.Spec.ClusterID, c.now).WithMaxLifetime(p.Spec.Approval.TokenTTL.Duration)
	tokens := contract.SplitApprovalTokens(annotation)
	var a *approval.Approvals
	if dryRun {
		a, err = v.CheckDryRunAll(tokens, want)
	} else {
		if c.Ledger == nil {
			return nil, nil, deny(rules.ApprovalLedger, "the webhook has no approval ledger, so it cannot guarantee single use")
		}
		a, err = v.ConsumeAll(ctx, tokens, want, c.Ledger)
	}
	if err != nil {
		return nil, nil, approvalDenial(err, inv)
	}
	ids := make([]string, 0, len(a.Claims))
	var warn []string
	first := a.Claims[0].Expiry
	for _, cl := range a.Claims {
		ids = append(ids, cl.ID)
		if cl.Expiry.Before(first) {
			first = cl.Expiry
		}
	}
	if left := first.Sub(c.now()); left < 2*time.Minute {
		warn = append(warn, fmt.Sprintf("the approval expires in %s", left.Round(time.Second)))
	}
	return ids, warn, nil
}

func approvalDenial(err error, inv *policy.Invocation) error {
	var few *approval.NotEnoughApprovalsError
	if errors.As(err, &few) {
		what := "call"
		if inv.PlanDigest != "" {
			what = "plan"
		}
		text := fmt.Sprintf("%s: this %s needs %d distinct approvers", approval.Progress(few.Have, few.Need), what, few.Need)
		if few.Repeated {
			text += "; the same approver twice counts once"
		}
		return deny(rules.Approval, "%s", text)
	}
	reasons := []struct {
		err  error
		text string
	}{
		{approval.ErrReplayed, "this approval was already used; every approval admits exactly one Job"},
		{approval.ErrDuplicateApprover, "the same approver twice counts once: one approver signed two of these approvals"},
		{approval.ErrOtherRequest, "the approvals are for different requests; all the approvals of one Job approve the same request"},
		{approval.ErrExpired, "the approval has expired; ask for a new one"},
		{approval.ErrTooLong, "the approval lives longer than the policy's spec.approval.tokenTTL; approve again with a shorter --ttl"},
		{approval.ErrNotYetValid, "the approval is not valid yet (check the clocks)"},
		{approval.ErrWrongAudience, "the approval is addressed to another cluster"},
		{approval.ErrWrongTool, "the approval is for another tool"},
		{approval.ErrParamsMismatch, "the approval is for other parameters"},
		{approval.ErrWrongNamespace, "the approval is for another target namespace"},
		{approval.ErrPlanMismatch, "the approval is for another plan"},
		{approval.ErrUnknownKey, "the approval is signed by a key that is not a trusted approver"},
		{approval.ErrBadSignature, "the approval's signature is invalid"},
		{approval.ErrMalformed, "the approval token is malformed"},
	}
	for _, r := range reasons {
		if errors.Is(err, r.err) {
			return deny(rules.Approval, "%s", r.text)
		}
	}
	return deny(rules.Approval, "the approval could not be verified: %v", err)
}
