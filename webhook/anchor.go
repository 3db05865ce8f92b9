package webhook

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/agent-sandbox/agent-sandbox/internal/audit"
	"github.com/agent-sandbox/agent-sandbox/internal/ledger"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/rules"
)

// Audit anchors (internal/audit, Anchor). The MCP server's audit log lives on a host the threat model
// does not trust, so the webhook, which that host cannot impersonate, keeps a record of every call it
// admits: the call's request ID and the head of the audit chain the server sent with it
// (contract.AnnotationAuditHead on a Job, the claim's auditHead on a warm Pod). `agent-sandbox audit
// verify --against-cluster` holds the log against these records, and finds a log cut short or rewritten.
// Recording is part of the admission: a call whose anchor cannot be recorded is refused (fail closed).

// AnchorLedger records audit anchors in the API server, shared by every webhook replica
// (ledger.ConfigMapLedger).
type AnchorLedger interface {
	// RecordAnchor stores a, to be kept until expires.
	RecordAnchor(ctx context.Context, a audit.Anchor, expires time.Time) error
	// ClaimAnchors reads the anchors of the claims admitted on the Pods with these UIDs, with their void
	// marks, from the API server.
	ClaimAnchors(ctx context.Context, pods []types.UID) ([]ledger.ClaimAnchor, error)
}

// DefaultAnchorRetention is how long an audit anchor is kept when the Checker sets no retention: 30 days.
const DefaultAnchorRetention = 720 * time.Hour

// checkHead refuses a call whose audit chain head is missing or malformed.
func checkHead(rule rules.ID, where, head string) error {
	switch {
	case head == "":
		return deny(rule, "%s with the head of the MCP server's audit chain is missing (the MCP server may be older than this webhook)", where)
	case !audit.ValidHead(head):
		return deny(rule, "%s must hold the head of the MCP server's audit chain, 64 lowercase hex digits, not %q", where, head)
	}
	return nil
}

// claimedPod is the warm Pod a claim is admitted on, as the admission request's old object has it: what
// the claim's anchor records, so that the pool can tell whether the claim was ever stored.
type claimedPod struct{ name, uid, resourceVersion string }

// recordAnchor records the audit anchor of an admitted call, unless the request is a dry run. It runs
// last, once everything else about the call was admitted. pod is the claimed Pod of a warm claim, the
// zero value for a Job.
func (c *Checker) recordAnchor(ctx context.Context, req Request, t *policy.Tool, requestID, head, job string, pod claimedPod) error {
	if req.DryRun {
		return nil
	}
	if c.Anchors == nil {
		return deny(rules.AuditAnchor, "the webhook has no anchor ledger, so it cannot anchor the call's audit trail")
	}
	retention := c.AnchorRetention
	if retention <= 0 {
		retention = DefaultAnchorRetention
	}
	a := audit.Anchor{RequestID: requestID, Head: head, Tool: t.Name, Job: job, User: req.User, Admitted: c.now(), Deadline: t.Deadline.Duration,
		Pod: pod.name, PodUID: pod.uid, PodResourceVersion: pod.resourceVersion}
	if err := c.Anchors.RecordAnchor(ctx, a, a.Admitted.Add(retention)); err != nil {
		return deny(rules.AuditAnchor, "cannot record the call's audit anchor: %v", err)
	}
	return nil
}
