package webhook

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/agent-sandbox/agent-sandbox/cel"
	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/rules"
)

// CheckJobRaw decides on a Job as the API server sent it: decoded once, then checked by CheckJob.
func (c *Checker) CheckJobRaw(ctx context.Context, req Request, raw, oldRaw []byte) (*Decision, error) {
	if _, err := c.loaded(); err != nil {
		return nil, err
	}
	obj, err := decodeObject(raw)
	if err != nil {
		return nil, deny(rules.Decode, "%v", err)
	}
	var old object
	if len(oldRaw) > 0 {
		if old, err = decodeObject(oldRaw); err != nil {
			return nil, deny(rules.Decode, "%v", err)
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
	key := renderKey{tool: labels[contract.LabelTool], params: annotations[contract.AnnotationParams], tokens: annotations[contract.AnnotationApprovalToken]}
	cached, hit := c.renderings.get(p, key)
	var inv *policy.Invocation
	if hit {
		// Only an invocation that succeeded is cached, and it depends on nothing but the key.
		inv = cached.inv
	} else if inv, err = invocation(p, labels, annotations); err != nil {
		return nil, err
	}
	requestID := labels[contract.LabelRequestID]
	if !approval.ValidRequestID(requestID) {
		return nil, deny(rules.ExactMetadata, "label %s must hold the call's request ID (req-…), not %q", contract.LabelRequestID, requestID)
	}
	head := annotations[contract.AnnotationAuditHead]
	if err := checkHead(rules.ExactMetadata, "annotation "+contract.AnnotationAuditHead, head); err != nil {
		return nil, err
	}
	d := &Decision{Tool: inv.Tool.Name, Cached: hit}
	token := key.tokens
	// The comparison is computed here, and reported in its turn below: the rules' verdict comes first.
	var r *rendering
	var want map[string]any
	var renderErr error
	if hit {
		r, want = cached, cached.forRequest(requestID, head)
	} else if token == "" || inv.Tool.RequiresApproval {
		var cacheable bool
		if r, cacheable, renderErr = newRendering(p, inv, requestID, token, head); cacheable {
			c.renderings.put(p, key, r)
		}
		if r != nil {
			want = r.tree
		}
	}
	var full map[string]any
	var exactErr error
	if want != nil {
		full, exactErr = withServerFields(obj, want)
	}
	if err := c.jobRules(ctx, p, obj, req.Operation, r, full); err != nil {
		return nil, err
	}
	if token != "" && !inv.Tool.RequiresApproval {
		return nil, deny(rules.ExactMetadata, "tool %s takes no approval token", inv.Tool.Name)
	}
	if renderErr != nil {
		return nil, deny(rules.Render, "%v", renderErr)
	}
	if exactErr != nil {
		return nil, exactErr
	}
	if err := compareJob(obj, full); err != nil {
		return nil, err
	}
	if err := c.admitCall(ctx, req, d, p, inv, token, requestID, head, jobName(want), obj.uid()); err != nil {
		return nil, err
	}
	return d, nil
}

// jobRules evaluates the policy's rules on a new Job. When the rules read only rendered fields and the Job
// agrees exactly with its expected tree (want, the API server's fields included) in all of them, their
// verdict is the rendering's: it is computed once and reused. Any other Job is evaluated on its own.
func (c *Checker) jobRules(ctx context.Context, p *policy.Compiled, obj object, op string, r *rendering, want map[string]any) error {
	reuse := r != nil && want != nil && op == "CREATE" && p.Rules.ReadsOnlyRenderedFields() && cel.SameRenderedFields(obj, want)
	if reuse {
		if vs := r.verdict.Load(); vs != nil {
			return violationsDenial(*vs)
		}
	}
	vs, err := c.violations(ctx, p, obj, "Job", op)
	if err != nil {
		return err
	}
	if reuse && pure(vs) {
		r.verdict.Store(&vs)
	}
	return violationsDenial(vs)
}

// pure reports whether a verdict depends on the object alone: a rule that could not be evaluated may have
// been stopped by its request's context.
func pure(vs []cel.Violation) bool {
	for _, v := range vs {
		if v.Unevaluated {
			return false
		}
	}
	return true
}

// admitCall ends the admission of a call's Job that is exactly its rendering, on either path: it consumes
// the approval of a tool that needs one, then records the call's audit anchor. Both are the last steps,
// so a Job refused for anything else burns neither.
func (c *Checker) admitCall(ctx context.Context, req Request, d *Decision, p *policy.Compiled, inv *policy.Invocation, token, requestID, head, job, uid string) error {
	if inv.Tool.RequiresApproval {
		ids, warn, err := c.checkApproval(ctx, p, inv, token, req.DryRun)
		if err != nil {
			return err
		}
		d.ApprovalTokenIDs = ids
		d.Warnings = append(d.Warnings, warn...)
	}
	if err := c.recordAnchor(ctx, req, inv.Tool, requestID, head, job, claimedPod{}); err != nil {
		return err
	}
	return c.recordJob(ctx, req, uid, inv.Tool.Deadline.Duration)
}

// recordJob records in the Pod ledger that the webhook admitted the Job of req, unless the request is a
// dry run, so that CheckPod admits a Pod only for a Job the webhook saw: a Job made while no webhook was
// registered (an install's gap, a namespace label removed and put back) can be the exact rendering of a
// call carrying an approval nobody signed, and its Pod, made once the webhook is back, that Job's exact Pod.
// deadline is how long after its admission the Job may still get its Pod: its active deadline.
func (c *Checker) recordJob(ctx context.Context, req Request, uid string, deadline time.Duration) error {
	if req.DryRun {
		return nil
	}
	if c.Pods == nil {
		return deny(rules.OnePodPerJob, "the webhook has no Pod ledger, so it cannot record that it admitted this Job")
	}
	if uid == "" {
		return deny(rules.OnePodPerJob, "the Job has no UID; the API server gives a new Job one before validating admission")
	}
	// The margin covers the Job controller's retries and clocks that differ.
	if err := c.Pods.RecordJob(ctx, types.UID(uid), c.now().Add(deadline+podLedgerMargin)); err != nil {
		return deny(rules.OnePodPerJob, "cannot record that the Job was admitted: %v", err)
	}
	return nil
}

func (c *Checker) evaluate(ctx context.Context, p *policy.Compiled, obj object, kind, op string) error {
	vs, err := c.violations(ctx, p, obj, kind, op)
	if err != nil {
		return err
	}
	return violationsDenial(vs)
}

// violations evaluates the policy's rules on an object.
func (c *Checker) violations(ctx context.Context, p *policy.Compiled, obj object, kind, op string) ([]cel.Violation, error) {
	in, err := cel.NewInput(&unstructured.Unstructured{Object: obj.withoutManagedFields()}, p.Settings(), op)
	if err != nil {
		return nil, deny(rules.Decode, "cannot read the %s: %v", kind, err)
	}
	return p.Rules.Evaluate(ctx, in), nil
}

// violationsDenial turns CEL violations into one denial, or nil when there are none.
func violationsDenial(vs []cel.Violation) error {
	switch len(vs) {
	case 0:
		return nil
	case 1:
		return deny(rules.ID(vs[0].Rule), "%s", vs[0].Message)
	}
	names := make([]string, len(vs))
	parts := make([]string, len(vs))
	for i, v := range vs {
		names[i], parts[i] = v.Rule, v.Rule+": "+v.Message
	}
	return &Denial{Rule: strings.Join(names, ","), Reason: fmt.Sprintf("%d rules failed: %s", len(vs), strings.Join(parts, "; "))}
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
	return nil, deny(rules.NoOrphans, "sandbox Job %s is deleted with its Pod (propagationPolicy Background or Foreground), never orphaning it (%s)",
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
		return nil, deny(rules.Immutable, "an UPDATE without the old object cannot be checked")
	}
	g, o := updateView(obj), updateView(old)
	if refs := g["metadata"].(map[string]any)["ownerReferences"]; kind == "Pod" && isEmpty(refs) && mayOrphan {
		// The garbage collector orphans a Pod by removing its owner reference.
		delete(o["metadata"].(map[string]any), "ownerReferences")
	}
	if m := diff("", g, o); m != nil {
		return nil, deny(rules.Immutable, "a sandbox %s cannot change after admission: %s", kind, strings.Replace(m.String(), "the policy renders", "it was admitted with", 1))
	}
	was := map[string]bool{}
	for _, f := range stringList(old.meta()["finalizers"]) {
		was[f] = true
	}
	for _, f := range stringList(obj.meta()["finalizers"]) {
		if !was[f] && !gcFinalizers[f] {
			return nil, deny(rules.Immutable, "finalizer %q cannot be added to a sandbox %s", f, kind)
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
