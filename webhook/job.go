package webhook

import (
	"context"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/agent-sandbox/agent-sandbox/cel"
	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
)

// CheckJobRaw decides on a Job as the API server sent it: a new Job that is exactly its rendering takes the
// fast path (fast.go); every other Job, and every UPDATE, is decoded and checked field by field.
func (c *Checker) CheckJobRaw(ctx context.Context, req Request, raw, oldRaw []byte) (*Decision, error) {
	p, err := c.loaded()
	if err != nil {
		return nil, err
	}
	if req.Operation == "CREATE" {
		if d, err := c.fastJob(ctx, p, req, raw); err != errNotFast {
			if d != nil {
				d.Fast = true
			}
			return d, err
		}
	}
	obj, err := decodeObject(raw)
	if err != nil {
		return nil, deny("decode", "%v", err)
	}
	var old object
	if len(oldRaw) > 0 {
		if old, err = decodeObject(oldRaw); err != nil {
			return nil, deny("decode", "%v", err)
		}
	}
	return c.CheckJob(ctx, req, obj, old)
}

// CheckJob decides on a Job in a sandbox namespace. A new Job must be exactly what the policy renders for
// its declared tool and parameters, plus the webhook's own injection, plus what the API server adds; any
// other field, whatever its name, is refused. A Job that needs approval consumes its token last, after
// every other check passed, so a refused Job never burns an approval.
func (c *Checker) CheckJob(ctx context.Context, req Request, obj, old object) (*Decision, error) {
	p, err := c.loaded()
	if err != nil {
		return nil, err
	}
	if req.Operation == "UPDATE" {
		return checkUpdate("Job", obj, old, false)
	}
	labels, annotations := obj.labels(), obj.annotations()
	if isWarm(labels) {
		return c.checkWarmJob(ctx, p, req, obj)
	}
	inv, err := invocation(p, labels, annotations)
	if err != nil {
		return nil, err
	}
	requestID := labels[contract.LabelRequestID]
	if !approval.ValidRequestID(requestID) {
		return nil, deny("exact-metadata", "label %s must hold the call's request ID (req-…), not %q", contract.LabelRequestID, requestID)
	}
	head := annotations[contract.AnnotationAuditHead]
	if err := checkHead("exact-metadata", "annotation "+contract.AnnotationAuditHead, head); err != nil {
		return nil, err
	}
	d := &Decision{Tool: inv.Tool.Name}
	if err := c.evaluate(ctx, p, obj, "Job", req.Operation); err != nil {
		return nil, err
	}
	token := annotations[contract.AnnotationApprovalToken]
	if token != "" && !inv.Tool.RequiresApproval {
		return nil, deny("exact-metadata", "tool %s takes no approval token", inv.Tool.Name)
	}
	want, err := expectedJob(p, inv, requestID, token, head)
	if err != nil {
		return nil, deny("render", "%v", err)
	}
	if err := exactJob(obj, want); err != nil {
		return nil, err
	}
	if err := c.admitCall(ctx, req, d, p, inv, token, requestID, head, want.Name); err != nil {
		return nil, err
	}
	return d, nil
}

// admitCall ends the admission of a call's Job that is exactly its rendering, on either path: it consumes
// the approval of a tool that needs one, then records the call's audit anchor. Both are the last steps,
// so a Job refused for anything else burns neither.
func (c *Checker) admitCall(ctx context.Context, req Request, d *Decision, p *policy.Compiled, inv *policy.Invocation, token, requestID, head, job string) error {
	if inv.Tool.RequiresApproval {
		ids, warn, err := c.checkApproval(ctx, p, inv, token, req.DryRun)
		if err != nil {
			return err
		}
		d.ApprovalTokenIDs = ids
		d.Warnings = append(d.Warnings, warn...)
	}
	return c.recordAnchor(ctx, req, inv.Tool, requestID, head, job)
}

func (c *Checker) evaluate(ctx context.Context, p *policy.Compiled, obj object, kind, op string) error {
	in, err := cel.NewInput(&unstructured.Unstructured{Object: obj.withoutManagedFields()}, p.Settings(), op)
	if err != nil {
		return deny("decode", "cannot read the %s: %v", kind, err)
	}
	if vs := p.Rules.Evaluate(ctx, in); len(vs) > 0 {
		return violationsDenial(vs)
	}
	return nil
}

// checkUpdate admits only the bookkeeping that Kubernetes itself does on a sandbox Job or Pod once it
// exists: the Job controller removing its tracking finalizer from a Pod, the garbage collector adding its
// finalizers or orphaning a Pod, and deletion. Everything else — the spec (parallelism, suspend,
// activeDeadlineSeconds, a Pod's image or tolerations), labels, annotations, owner references — is
// immutable after admission, also while the object is being deleted.
// CheckJobDelete refuses to delete a sandbox Job in a way that leaves its Pod behind. The API server
// orphans a batch/v1 Job's Pods when the request names no propagation policy (for backward compatibility)
// or names Orphan; an orphaned Pod escapes its Job's deadline and every cleanup. Background and Foreground
// deletes are allowed to whoever RBAC allows.
func (c *Checker) CheckJobDelete(_ context.Context, req Request) (*Decision, error) {
	policy, _ := req.Options["propagationPolicy"].(string)
	orphan, orphanSet := req.Options["orphanDependents"].(bool)
	switch {
	case policy == "Background" || policy == "Foreground":
		return &Decision{}, nil
	case policy == "" && orphanSet && !orphan:
		return &Decision{}, nil
	}
	return nil, deny("no-orphans", "sandbox Job %s is deleted with its Pod (propagationPolicy Background or Foreground), never orphaning it (%s)",
		req.Name, describeDeletePolicy(policy, orphan, orphanSet))
}

func describeDeletePolicy(policy string, orphan, orphanSet bool) string {
	switch {
	case policy != "":
		return "propagationPolicy " + policy
	case orphanSet && orphan:
		return "orphanDependents true"
	}
	return "no propagationPolicy: batch/v1 Jobs orphan their Pods by default"
}

// checkUpdate refuses any change to an admitted Job or Pod beyond the API server's bookkeeping, the
// garbage collector's finalizers and, for a Pod, the garbage collector removing its owner reference
// (mayOrphan: only the garbage collector's identity).
func checkUpdate(kind string, obj, old object, mayOrphan bool) (*Decision, error) {
	if old == nil {
		return nil, deny("immutable", "an UPDATE without the old object cannot be checked")
	}
	g, o := updateView(obj), updateView(old)
	if refs := g["metadata"].(map[string]any)["ownerReferences"]; kind == "Pod" && isEmpty(refs) && mayOrphan {
		// The garbage collector orphans a Pod by removing its owner reference.
		delete(o["metadata"].(map[string]any), "ownerReferences")
	}
	if m := diff("", g, o); m != nil {
		return nil, deny("immutable", "a sandbox %s cannot change after admission: %s", kind, strings.Replace(m.String(), "the policy renders", "it was admitted with", 1))
	}
	was := map[string]bool{}
	for _, f := range stringList(old.meta()["finalizers"]) {
		was[f] = true
	}
	for _, f := range stringList(obj.meta()["finalizers"]) {
		if !was[f] && !gcFinalizers[f] {
			return nil, deny("immutable", "finalizer %q cannot be added to a sandbox %s", f, kind)
		}
	}
	return &Decision{Tool: obj.labels()[contract.LabelTool]}, nil
}

// updateView is an object without what may change after admission: the server's metadata, finalizers,
// the deletion marks and the status.
func updateView(o object) map[string]any {
	out := withoutServerFields(o)
	delete(out, "status")
	m := out["metadata"].(map[string]any)
	for _, k := range []string{"finalizers", "deletionTimestamp", "deletionGracePeriodSeconds"} {
		delete(m, k)
	}
	return out
}
