package webhook

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
)

// checkApproval verifies the approval token and, unless the request is a dry run, consumes it. The
// token's ID is recorded in the shared ledger before the Job is admitted: a second Job with the same token,
// even one racing this one through another replica, is refused.
func (c *Checker) checkApproval(ctx context.Context, p *policy.Compiled, inv *policy.Invocation, token string, dryRun bool) (string, []string, error) {
	if token == "" {
		return "", nil, deny("approval-required", "tool %s needs a human's signed approval in annotation %s; the agent's request waits for `agent-sandbox approve`", inv.Tool.Name, contract.AnnotationApprovalToken)
	}
	keys := c.keys.Load()
	if keys == nil || keys.Len() == 0 {
		return "", nil, deny("approval-keys", "no approver public keys are configured, so no approval can be accepted")
	}
	hash, err := approval.ParamsHash(inv.Tool.Name, inv.Params)
	if err != nil {
		return "", nil, deny("invalid-parameters", "%v", err)
	}
	want := approval.Expectation{Tool: inv.Tool.Name, ParamsHash: hash, Namespace: inv.TargetNamespace, PlanDigest: inv.PlanDigest}
	v := approval.NewVerifier(keys, p.Spec.ClusterID, c.now).WithMaxLifetime(p.Spec.Approval.TokenTTL.Duration)
	var claims *approval.Claims
	if dryRun {
		claims, err = v.CheckDryRun(token, want)
	} else {
		if c.Ledger == nil {
			return "", nil, deny("approval-ledger", "the webhook has no approval ledger, so it cannot guarantee single use")
		}
		claims, err = v.Consume(ctx, token, want, c.Ledger)
	}
	if err != nil {
		return "", nil, approvalDenial(err)
	}
	var warn []string
	if left := claims.Expiry.Sub(c.now()); left < 2*time.Minute {
		warn = append(warn, fmt.Sprintf("the approval expires in %s", left.Round(time.Second)))
	}
	return claims.ID, warn, nil
}

func approvalDenial(err error) error {
	reasons := []struct {
		err  error
		text string
	}{
		{approval.ErrReplayed, "this approval was already used; every approval admits exactly one Job"},
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
			return deny("approval", "%s", r.text)
		}
	}
	return deny("approval", "the approval could not be verified: %v", err)
}
