package webhook

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/ledger"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/rules"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
)

// The warm pool (docs/design/warm-pool.md). A warm Job is admitted only as the exact warm rendering of a
// tool that has a pool; its Pod only as that rendering's template, once; and a warm Pod changes only by
// one claim, which is validated like a call's Job: typed parameters, namespace, the policy's argv, a
// request ID never seen before, the audit chain head, and for a tool that needs one, the approval, consumed
// in the shared ledger; the claim's audit anchor is recorded last.

// ClaimLedger records the request IDs of admitted claims, shared by every webhook replica
// (ledger.ConfigMapLedger), so a claim cannot be replayed onto another warm Pod.
type ClaimLedger interface {
	// RecordClaim stores requestID, or returns ledger.ErrClaimReplayed.
	RecordClaim(ctx context.Context, requestID string, expires time.Time) error
}

// claimLedgerLife keeps a claim's request ID long past any call that could carry it.
const claimLedgerLife = 24 * time.Hour

// isWarm reports whether labels declare a warm object (whatever the value: only "true" renders).
func isWarm(labels map[string]string) bool {
	_, ok := labels[contract.LabelWarm]
	return ok
}

// warmTool returns the policy tool a warm object declares, if it has a pool.
func warmTool(p *policy.Compiled, labels map[string]string) (*policy.Tool, error) {
	t, err := p.Tool(labels[contract.LabelTool])
	if err != nil {
		return nil, deny(rules.UnknownTool, "tool %q is not in the policy (default deny)", labels[contract.LabelTool])
	}
	if t.WarmPool == nil {
		return nil, deny(rules.WarmPool, "tool %s has no warm pool in the policy", t.Name)
	}
	return t, nil
}

// expectedWarmJob renders the warm Job name must be: the policy's warm rendering of tool t, with the
// webhook's injection and the API server's defaults.
func expectedWarmJob(p *policy.Compiled, t *policy.Tool, name, claimKeys string) (*batchv1.Job, error) {
	suffix, ok := sandbox.WarmSuffix(t.Name, name)
	if !ok {
		return nil, deny(rules.ExactMetadata, "a warm Job of %s is named %s followed by w and 11 base32hex characters, not %q", t.Name, sandbox.JobNamePrefix(t.Name), name)
	}
	job, err := sandbox.RenderWarmJob(p, t, suffix)
	if err != nil {
		return nil, deny(rules.Render, "%v", err)
	}
	InjectWarm(&job.Spec.Template.ObjectMeta, &job.Spec.Template.Spec, p, t, claimKeys)
	applyJobDefaults(job)
	return job, nil
}

// checkWarmJob decides on a new warm Job: exactly the warm rendering of its tool, nothing else.
func (c *Checker) checkWarmJob(ctx context.Context, p *policy.Compiled, req Request, obj object) (*Decision, error) {
	if !contains(c.Identities.PoolUsers, req.User) {
		return nil, deny(rules.WarmPool, "warm Jobs are created only by the webhook's pool controller, not by %s", req.User)
	}
	t, err := warmTool(p, obj.labels())
	if err != nil {
		return nil, err
	}
	name, _ := obj.meta()["name"].(string)
	want, err := expectedWarmJob(p, t, name, c.claimKeys())
	if err != nil {
		return nil, err
	}
	if err := c.evaluate(ctx, p, obj, "Job", req.Operation); err != nil {
		return nil, err
	}
	if err := exactJob(obj, want); err != nil {
		return nil, err
	}
	// A warm Job waits, idle, up to its whole deadline before its claim's call runs.
	if err := c.recordJob(ctx, req, obj.uid(), time.Duration(ptr.Deref(want.Spec.ActiveDeadlineSeconds, 0))*time.Second); err != nil {
		return nil, err
	}
	return &Decision{Tool: t.Name}, nil
}

// checkClaim decides on an UPDATE of a warm Pod that adds its claim.
func (c *Checker) checkClaim(ctx context.Context, p *policy.Compiled, req Request, obj, old object) (*Decision, error) {
	t, err := warmTool(p, old.labels())
	if err != nil {
		return nil, err
	}
	if old.labels()[contract.LabelWarm] != "true" {
		return nil, deny(rules.Claim, "only a warm Pod can be claimed")
	}
	owner, _, ok := controllerJob(old)
	if _, warm := sandbox.WarmSuffix(t.Name, owner); !ok || !warm {
		return nil, deny(rules.Claim, "the Pod is not the Pod of a warm Job of %s", t.Name)
	}
	if old.meta()["deletionTimestamp"] != nil {
		return nil, deny(rules.Claim, "the warm Pod is being deleted")
	}
	// The Pod must still be what the policy in force renders: a Pod started under an older policy (another
	// image, scope or Vault role) is not claimed but replaced by the pool.
	if err := c.stillRendered(ctx, p, t, req.Namespace, owner, old); err != nil {
		return nil, err
	}
	if st, _ := old["status"].(map[string]any); st != nil && (st["phase"] == string(corev1.PodSucceeded) || st["phase"] == string(corev1.PodFailed)) {
		return nil, deny(rules.Claim, "the warm Pod has finished (%v)", st["phase"])
	}
	// Everything but the claim and the webhook's signature of it must stay as it was admitted.
	raw := obj.annotations()[contract.AnnotationClaim]
	rest := withoutAnnotation(withoutAnnotation(obj, contract.AnnotationClaim), contract.AnnotationClaimSignature)
	if _, err := checkUpdate("Pod", rest, old, false); err != nil {
		var d *Denial
		if errors.As(err, &d) {
			return nil, deny(rules.ClaimExact, "a claim adds the annotation %s (and the webhook its signature %s) and changes nothing else: %s",
				contract.AnnotationClaim, contract.AnnotationClaimSignature, d.Reason)
		}
		return nil, err
	}
	claim, err := sandbox.ParseClaim(raw)
	if err != nil {
		return nil, deny(rules.Claim, "%v", err)
	}
	if claim.Tool != t.Name {
		return nil, deny(rules.Claim, "the claim is for tool %q, but this warm Pod runs %s", claim.Tool, t.Name)
	}
	inv, err := invocation(p, map[string]string{contract.LabelTool: t.Name}, map[string]string{contract.AnnotationParams: string(claim.Params)})
	if err != nil {
		return nil, err
	}
	if !approval.ValidRequestID(claim.RequestID) {
		return nil, deny(rules.Claim, "the claim's request ID must be the call's (req-…), not %q", claim.RequestID)
	}
	if claim.ApprovalToken != "" && !t.RequiresApproval {
		return nil, deny(rules.Claim, "tool %s takes no approval token", t.Name)
	}
	if err := checkHead(rules.Claim, "the claim's auditHead", claim.AuditHead); err != nil {
		return nil, err
	}
	want, err := sandbox.RenderClaim(inv, claim.RequestID, contract.SplitApprovalTokens(claim.ApprovalToken), claim.AuditHead)
	if err != nil {
		return nil, deny(rules.Render, "%v", err)
	}
	if raw != want {
		return nil, deny(rules.ClaimExact, "%s", claimDifference(claim, inv))
	}
	if err := c.evaluate(ctx, p, obj, "Pod", req.Operation); err != nil {
		return nil, err
	}
	// The warm Pod runs nothing without the webhook's signature of exactly this claim for exactly this Pod.
	if err := c.requireClaimSignature(req, obj, old, raw); err != nil {
		return nil, err
	}
	pod := claimedPod{name: old.name()}
	pod.uid, _ = old.meta()["uid"].(string)
	pod.resourceVersion, _ = old.meta()["resourceVersion"].(string)
	return c.recordClaim(ctx, p, req, t, inv, claim, owner, pod)
}

// recordClaim records an admitted claim in the ledgers, in this order: no other claim pending on the Pod
// as it is, the request ID never claimed before, the approval consumed (for a tool that needs one), and
// last its audit anchor. A dry run records nothing.
func (c *Checker) recordClaim(ctx context.Context, p *policy.Compiled, req Request, t *policy.Tool, inv *policy.Invocation, claim *sandbox.Claim, owner string, pod claimedPod) (*Decision, error) {
	if err := c.checkPendingClaim(ctx, pod, claim.RequestID); err != nil {
		return nil, err
	}
	d := &Decision{Tool: t.Name}
	if !req.DryRun {
		if c.Claims == nil {
			return nil, deny(rules.ClaimLedger, "the webhook has no claim ledger, so it cannot guarantee that a claim is used once")
		}
		err := c.Claims.RecordClaim(ctx, claim.RequestID, c.now().Add(claimLedgerLife))
		switch {
		case errors.Is(err, ledger.ErrClaimReplayed):
			return nil, deny(rules.ClaimReplayed, "request %s was already claimed; every call claims one warm Pod, once", claim.RequestID)
		case err != nil:
			return nil, deny(rules.ClaimLedger, "cannot record the claim: %v", err)
		}
	}
	if t.RequiresApproval {
		ids, warn, err := c.checkApproval(ctx, p, inv, claim.ApprovalToken, req.DryRun)
		if err != nil {
			return nil, err
		}
		d.ApprovalTokenIDs = ids
		d.Warnings = append(d.Warnings, warn...)
	}
	if err := c.recordAnchor(ctx, req, t, claim.RequestID, claim.AuditHead, owner, pod); err != nil {
		return nil, err
	}
	return d, nil
}

// checkPendingClaim refuses a claim on a warm Pod on which a claim of another request was admitted against
// this very resourceVersion and anchored, and not voided: the API server stores at most one of the two, and
// the first may still be on its way (or its webhook replica died before the API server stored it). While
// the first claim's fate is open the Pod takes no other, so that the Pod itself keeps the evidence the pool
// needs to settle it (Pool.settleClaims; docs/design/audit-anchors.md, "A claim admitted but never
// stored"); the call goes to another warm Pod or cold. It comes before the claim ledger, so a refused call
// keeps its request ID for the next Pod.
func (c *Checker) checkPendingClaim(ctx context.Context, pod claimedPod, requestID string) error {
	if c.Anchors == nil || pod.uid == "" {
		return nil // without an anchor ledger nothing is anchored, and a real claim is refused at its anchor
	}
	anchors, err := c.Anchors.ClaimAnchors(ctx, []types.UID{types.UID(pod.uid)})
	if err != nil {
		return deny(rules.ClaimPending, "cannot read the anchors of earlier claims on this warm Pod: %v", err)
	}
	for _, a := range anchors {
		if a.RequestID != requestID && a.PodResourceVersion == pod.resourceVersion && a.Void == nil {
			return deny(rules.ClaimPending, "the claim of %s was admitted on this warm Pod as it is now (resourceVersion %s) at %s and has not been stored; the Pod takes no other claim until the warm pool settles that one",
				a.RequestID, a.PodResourceVersion, a.Admitted.UTC().Format(time.RFC3339))
		}
	}
	return nil
}

// stillRendered checks that a warm Pod's owner Job exists, is running, and that the Pod, as it is now, is
// exactly the current policy's warm rendering of its tool (after its admission only the scheduler's node
// name and the server's own fields were added).
func (c *Checker) stillRendered(ctx context.Context, p *policy.Compiled, t *policy.Tool, namespace, owner string, old object) error {
	if c.Cluster == nil {
		return deny(rules.OwnerJob, "the webhook cannot read Jobs to check this warm Pod's owner")
	}
	job, err := c.Cluster.GetJob(ctx, namespace, owner)
	if err != nil {
		return deny(rules.OwnerJob, "cannot read the warm Pod's Job %s: %v", owner, err)
	}
	if uid := old.meta()["ownerReferences"]; !ownedBy(uid, string(job.UID)) {
		return deny(rules.OwnerJob, "the warm Pod's owner reference does not name Job %s (UID %s)", owner, job.UID)
	}
	if err := runnable(job); err != nil {
		return err
	}
	want, err := expectedWarmJob(p, t, job.Name, c.claimKeys())
	if err != nil {
		return err
	}
	if err := exactPod(asAdmitted(old), want, job); err != nil {
		var d *Denial
		if errors.As(err, &d) {
			return deny(rules.ClaimStale, "the warm Pod is not what the policy in force renders for %s; the pool replaces it: %s", t.Name, d.Reason)
		}
		return err
	}
	return nil
}

// topologyLabels are the labels the API server's PodTopologyLabels admission plugin copies from a node
// onto the Binding of a Pod to it, and so onto the Pod (Kubernetes 1.35+, on by default): the only
// metadata a sandbox Pod gains after its admission besides the API server's own fields and a warm Pod's
// claim.
var topologyLabels = []string{"topology.kubernetes.io/zone", "topology.kubernetes.io/region"}

// asAdmitted is a sandbox Pod as it is now (running, perhaps claimed), seen as the webhook admitted it, for
// exactPod: without the API server's own fields, its status, the node the scheduler bound it to and the
// topology labels that binding copied from that node, and for a warm Pod without its claim and the
// webhook's signature of it (the claim was checked when admitted, and the warm Pod runs nothing without
// that signature). Everything else must still be the rendering. obj is not modified.
func asAdmitted(obj object) object {
	pod := object(withoutServerFields(obj))
	delete(pod, "status")
	spec, _ := pod["spec"].(map[string]any)
	node, _ := spec["nodeName"].(string)
	if spec != nil {
		s := make(map[string]any, len(spec))
		for k, v := range spec {
			if k != "nodeName" {
				s[k] = v
			}
		}
		pod["spec"] = s
	}
	meta := pod.meta() // a copy already (withoutServerFields)
	drop := func(field string, keys ...string) {
		m, _ := meta[field].(map[string]any)
		if m == nil {
			return
		}
		c := make(map[string]any, len(m))
		for k, v := range m {
			if !slices.Contains(keys, k) {
				c[k] = v
			}
		}
		if len(c) == 0 {
			delete(meta, field)
		} else {
			meta[field] = c
		}
	}
	if node != "" {
		drop("labels", topologyLabels...)
	}
	if isWarm(obj.labels()) {
		drop("annotations", contract.AnnotationClaim, contract.AnnotationClaimSignature)
	}
	return pod
}

// ownedBy reports whether the controlling owner reference in refs has uid.
func ownedBy(refs any, uid string) bool {
	list, _ := refs.([]any)
	for _, r := range list {
		m, _ := r.(map[string]any)
		if c, _ := m["controller"].(bool); c {
			return m["uid"] == uid
		}
	}
	return false
}

// claimDifference says how a claim differs from the policy's rendering of its own parameters.
func claimDifference(c *sandbox.Claim, inv *policy.Invocation) string {
	switch {
	case c.Namespace != inv.TargetNamespace:
		return fmt.Sprintf("the claim targets namespace %q; its parameters target %q", c.Namespace, inv.TargetNamespace)
	case !slices.Equal(c.Argv, inv.Argv):
		return fmt.Sprintf("the claim's argv %q is not the policy's rendering %q", c.Argv, inv.Argv)
	}
	return "the claim is not in its canonical form (parameters canonical, fields in order, nothing else)"
}

// withoutAnnotation returns obj without one annotation, sharing nothing that it changes.
func withoutAnnotation(obj object, key string) object {
	out := make(object, len(obj))
	for k, v := range obj {
		out[k] = v
	}
	meta := make(map[string]any, len(obj.meta()))
	for k, v := range obj.meta() {
		meta[k] = v
	}
	if a, ok := meta["annotations"].(map[string]any); ok {
		b := make(map[string]any, len(a))
		for k, v := range a {
			if k != key {
				b[k] = v
			}
		}
		if len(b) == 0 {
			delete(meta, "annotations")
		} else {
			meta["annotations"] = b
		}
	}
	out["metadata"] = meta
	return out
}
