package webhook

import (
	"fmt"
	"maps"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/rules"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
)

// Labels the API server and the Job controller put on a Job's pod template and Pods. They are the only
// metadata a sandbox object may carry that the policy did not render.
const (
	labelControllerUID       = "batch.kubernetes.io/controller-uid"
	labelJobName             = "batch.kubernetes.io/job-name"
	labelLegacyControllerUID = "controller-uid"
	labelLegacyJobName       = "job-name"
	// finalizerJobTracking is the finalizer the Job controller puts on every Pod it creates and removes
	// once it has counted the Pod.
	finalizerJobTracking = "batch.kubernetes.io/job-tracking"
)

// gcFinalizers are the finalizers an UPDATE may add to a sandbox Job or Pod: foregroundDeletion only
// makes the garbage collector delete the Pods first. Not orphan: an orphaned Pod escapes its Job's
// deadline and every cleanup (the API server itself adds the finalizers of a DELETE without an UPDATE, and
// CheckJobDelete refuses orphaning deletes).
var gcFinalizers = map[string]bool{"foregroundDeletion": true}

// serverMetadata are metadata fields the API server fills in itself. They are not compared.
var serverMetadata = []string{"uid", "resourceVersion", "creationTimestamp", "generation", "managedFields", "selfLink"}

// expectedJob renders what the policy allows for an invocation: the Job the MCP server must submit, with
// the webhook's own injection and the API server's defaults. The Job's name is derived from the tool and
// the request (or, for a tool that needs approval, from its approval tokens) so that nobody can hold a
// name that an approved call will need. tokens is the approval-token annotation the Job declares, one token
// or several joined, rendered back exactly as declared (checkApproval verifies them). head is the audit
// chain head the Job declares (checked by the caller): it is rendered into the Job's annotations as declared.
func expectedJob(p *policy.Compiled, inv *policy.Invocation, requestID, tokens, head string) (*batchv1.Job, error) {
	job, err := sandbox.RenderJob(p, sandbox.JobSpec{Invocation: inv, RequestID: requestID,
		ApprovalTokens: contract.SplitApprovalTokens(tokens), AuditHead: head})
	if err != nil {
		return nil, err
	}
	Inject(&job.Spec.Template.ObjectMeta, &job.Spec.Template.Spec, p, inv)
	applyJobDefaults(job)
	return job, nil
}

// exactJob compares an admitted Job (as the API server sent it, after defaults and mutation) with the
// expectation. Besides the policy's rendering it allows only what the API server itself adds: the
// server's own metadata, the selector it generates from the Job's UID and the matching labels on the pod
// template.
func exactJob(got map[string]any, want *batchv1.Job) error {
	w, err := expectedTree(want)
	if err != nil {
		return deny(rules.Render, "%v", err)
	}
	return exactJobTree(got, w)
}

// expectedTree is an expected Job as the tree the comparison reads: converted as the API server's JSON
// would decode, without what a new Job leaves empty (its status and the creation timestamps). It is pure,
// so one tree serves every Job of one rendering (rendering.go).
func expectedTree(want *batchv1.Job) (map[string]any, error) {
	w, err := toUnstructured(want)
	if err != nil {
		return nil, err
	}
	delete(w["metadata"].(map[string]any), "creationTimestamp")
	delete(w["spec"].(map[string]any)["template"].(map[string]any)["metadata"].(map[string]any), "creationTimestamp")
	delete(w, "status")
	return w, nil
}

// exactJobTree is exactJob on an expected tree, which it does not modify (it may be a cached rendering's).
func exactJobTree(got, want map[string]any) error {
	w, err := withServerFields(got, want)
	if err != nil {
		return err
	}
	return compareJob(got, w)
}

// withServerFields returns the expected tree with what the API server adds to a new Job: the selector it
// generates from the Job's UID and the matching labels on the pod template. The maps it adds them to are
// copies; want is not modified.
func withServerFields(got, want map[string]any) (map[string]any, error) {
	meta, _ := got["metadata"].(map[string]any)
	uid, _ := meta["uid"].(string)
	name, _ := meta["name"].(string)
	if uid == "" {
		// The API server gives every new object its UID before validating admission, and the selector
		// and the template's labels are compared with values derived from it.
		return nil, deny(rules.ExactMetadata, "the Job has no UID; a Job the API server is creating always has one")
	}

	w := maps.Clone(want)
	spec := cloneMember(w, "spec")
	spec["selector"] = map[string]any{"matchLabels": map[string]any{labelControllerUID: uid}}
	spec["manualSelector"] = false
	labels := cloneMember(cloneMember(cloneMember(spec, "template"), "metadata"), "labels")
	labels[labelControllerUID], labels[labelJobName] = uid, name
	labels[labelLegacyControllerUID], labels[labelLegacyJobName] = uid, name
	return w, nil
}

// compareJob compares a new Job with its expected tree, the API server's fields included
// (withServerFields).
func compareJob(got, w map[string]any) error {
	g := withoutServerFields(got)
	if st, ok := g["status"]; ok && !isEmpty(st) {
		return deny(rules.Exact, "a new Job must not carry a status")
	}
	delete(g, "status")
	if m := diff("", g, w); m != nil {
		return deny(exactRule("Job", m.Path), "%s", m)
	}
	return nil
}

// exactPod compares a Pod the Job controller creates with the pod template the policy renders (with the
// API server's Pod defaults and the additions of its standard Pod admission plugins) and with its owner.
func exactPod(got map[string]any, want *batchv1.Job, owner *batchv1.Job) error {
	tmpl := want.Spec.Template.DeepCopy()
	w, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&corev1.Pod{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec})
	if err != nil {
		return deny(rules.Render, "%v", err)
	}
	w["apiVersion"], w["kind"] = "v1", "Pod"
	delete(w, "status")

	meta, _ := got["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	wantMeta := w["metadata"].(map[string]any)
	delete(wantMeta, "creationTimestamp")
	prefix := owner.Name + "-"
	wantMeta["generateName"] = prefix
	if !strings.HasPrefix(name, prefix) {
		return deny(rules.Exact, "the Pod's name %q does not start with its Job's name", name)
	}
	wantMeta["name"] = name
	wantMeta["namespace"] = owner.Namespace
	labels, _ := wantMeta["labels"].(map[string]any)
	if labels == nil {
		labels = map[string]any{}
		wantMeta["labels"] = labels
	}
	uid := string(owner.UID)
	labels[labelControllerUID], labels[labelJobName] = uid, owner.Name
	labels[labelLegacyControllerUID], labels[labelLegacyJobName] = uid, owner.Name
	wantMeta["ownerReferences"] = []any{map[string]any{
		"apiVersion": "batch/v1", "kind": "Job", "name": owner.Name, "uid": uid,
		"controller": true, "blockOwnerDeletion": true,
	}}
	wantMeta["finalizers"] = []any{finalizerJobTracking}

	spec := w["spec"].(map[string]any)
	gspec, _ := got["spec"].(map[string]any)
	// The Priority admission plugin resolves the (empty) priority class to priority 0, and the
	// DefaultTolerationSeconds plugin tolerates not-ready and unreachable nodes for a while.
	spec["priority"] = int64(0)
	spec["preemptionPolicy"] = string(corev1.PreemptLowerPriority)
	spec["tolerations"] = withDefaultTolerations(spec["tolerations"], gspec["tolerations"])

	g := withoutServerFields(got)
	// A Pod's status at creation is the API server's (Pending, its QoS class); nothing to compare.
	delete(g, "status")
	if m := diff("", g, w); m != nil {
		return deny(exactRule("Pod", m.Path), "%s", m)
	}
	return nil
}

// withDefaultTolerations appends to the rendered tolerations the ones the DefaultTolerationSeconds
// admission plugin adds, taken from the Pod (their seconds are a cluster setting), and nothing else.
func withDefaultTolerations(rendered, got any) []any {
	out, _ := rendered.([]any)
	out = append([]any(nil), out...)
	gl, _ := got.([]any)
	for _, t := range gl {
		m, _ := t.(map[string]any)
		key, _ := m["key"].(string)
		if (key == "node.kubernetes.io/not-ready" || key == "node.kubernetes.io/unreachable") && m["operator"] == "Exists" && m["effect"] == "NoExecute" && len(m) == 4 {
			if _, ok := number(m["tolerationSeconds"]); ok {
				out = append(out, m)
			}
		}
	}
	return out
}

// withoutServerFields returns a shallow copy of obj whose metadata leaves out what the API server fills in.
func withoutServerFields(obj map[string]any) map[string]any {
	out := make(map[string]any, len(obj))
	for k, v := range obj {
		out[k] = v
	}
	if meta, ok := obj["metadata"].(map[string]any); ok {
		m := make(map[string]any, len(meta))
		for k, v := range meta {
			m[k] = v
		}
		for _, k := range serverMetadata {
			delete(m, k)
		}
		out["metadata"] = m
	}
	return out
}

func toUnstructured(j *batchv1.Job) (map[string]any, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(j)
	if err != nil {
		return nil, fmt.Errorf("convert the rendered Job: %w", err)
	}
	u["apiVersion"], u["kind"] = "batch/v1", "Job"
	return u, nil
}

// exactRule names the denial after the part of the object that differs, so that a reader of the
// admission error (or of the webhook's metrics) sees at once whether it was the command, the image, the
// Job's shape or some other field.
func exactRule(kind, path string) rules.ID {
	podSpec := "spec"
	if kind == "Job" {
		podSpec = "spec.template.spec"
	}
	switch {
	case strings.HasPrefix(path, "metadata"), strings.HasPrefix(path, "spec.template.metadata"):
		return rules.ExactMetadata
	case strings.HasSuffix(path, ".image"):
		return rules.ExactImage
	case strings.HasSuffix(path, ".command"), strings.Contains(path, ".command["), strings.HasSuffix(path, ".args"), strings.Contains(path, ".args["):
		return rules.ExactCommand
	case path == podSpec+".serviceAccountName", path == podSpec+".serviceAccount":
		return rules.ServiceAccount
	case strings.HasPrefix(path, podSpec):
		return rules.ExactPodSpec
	case kind == "Job" && strings.HasPrefix(path, "spec"):
		return rules.JobShape
	}
	return rules.Exact
}

// CompareWithRendering compares a Job as the API server returns it (JSON) with the webhook's expectation
// for its declared tool and parameters, in namespace ns instead of the sandbox namespace. It is the
// exactness check alone (no CEL rules, no approval), for tests that hold the rendering against a real API
// server's defaults.
func CompareWithRendering(p *policy.Compiled, raw []byte, ns string) error {
	obj, err := decodeObject(raw)
	if err != nil {
		return err
	}
	labels, annotations := obj.labels(), obj.annotations()
	inv, err := invocation(p, labels, annotations)
	if err != nil {
		return err
	}
	want, err := expectedJob(p, inv, labels[contract.LabelRequestID], annotations[contract.AnnotationApprovalToken], annotations[contract.AnnotationAuditHead])
	if err != nil {
		return err
	}
	want.Namespace = ns
	return exactJob(obj, want)
}
