package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/agent-sandbox/agent-sandbox/cel"
	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/scrub"
)

// Denial is a refusal: which rule failed and why, on one line a person can act on.
type Denial struct {
	Rule   string
	Reason string
}

func (d *Denial) Error() string {
	return "agent-sandbox denied this: " + d.Rule + ": " + scrub.String(oneLine(d.Reason))
}

func deny(rule, format string, args ...any) *Denial {
	return &Denial{Rule: rule, Reason: fmt.Sprintf(format, args...)}
}

// JobGetter reads a Job; the Pod check uses it to confirm a Pod's owner is a Job that was admitted.
type JobGetter interface {
	GetJob(ctx context.Context, namespace, name string) (*batchv1.Job, error)
}

// Checker makes every admission decision. It holds the current policy and approver keys, both swapped
// atomically when their sources change, so a decision always sees one consistent version of each.
type Checker struct {
	policy atomic.Pointer[policy.Compiled]
	keys   atomic.Pointer[approval.KeySet]
	// Ledger records used approval token IDs; it must be shared by every webhook replica.
	Ledger approval.Ledger
	// Jobs reads the owner Job of a Pod.
	Jobs JobGetter
	// JobControllerUsers are the API users allowed to create Pods in sandbox namespaces.
	JobControllerUsers []string
	// Now is the clock; tests inject one.
	Now func() time.Time
}

// DefaultJobControllerUsers are the identities under which kube-controller-manager's Job controller
// creates Pods, with and without --use-service-account-credentials.
var DefaultJobControllerUsers = []string{"system:serviceaccount:kube-system:job-controller", "system:kube-controller-manager"}

// SetPolicy swaps in a compiled policy. Callers compile first: a policy that does not compile never
// reaches the checker, so the last good one keeps serving.
func (c *Checker) SetPolicy(p *policy.Compiled) { c.policy.Store(p) }

// Policy returns the policy in force, or nil before the first one is set.
func (c *Checker) Policy() *policy.Compiled { return c.policy.Load() }

// SetKeys swaps in the trusted approver public keys.
func (c *Checker) SetKeys(k *approval.KeySet) { c.keys.Store(k) }

// Request is what a decision needs to know about the admission request besides the object.
type Request struct {
	Operation string // CREATE or UPDATE
	User      string
	DryRun    bool
}

// Decision is the outcome of an allowed request: warnings to show and, for audit, what was decided.
type Decision struct {
	Tool     string
	Warnings []string
	// ApprovalTokenID is set when a Job consumed an approval.
	ApprovalTokenID string
}

// CheckJob decides on a Job in a sandbox namespace.
func (c *Checker) CheckJob(ctx context.Context, req Request, job, old *batchv1.Job) (*Decision, error) {
	p := c.policy.Load()
	if p == nil {
		return nil, deny("policy-not-loaded", "the webhook has no valid policy yet; check its logs")
	}
	if req.Operation == "UPDATE" {
		return c.checkUpdate(&job.ObjectMeta, &old.ObjectMeta, job.Spec, old.Spec, job.Labels[contract.LabelTool])
	}
	inv, err := c.invocation(p, &job.ObjectMeta)
	if err != nil {
		return nil, err
	}
	d := &Decision{Tool: inv.Tool.Name}
	if err := sameCorrelation(&job.ObjectMeta, &job.Spec.Template.ObjectMeta); err != nil {
		return nil, err
	}
	if err := jobShape(job); err != nil {
		return nil, err
	}
	if err := c.evaluate(ctx, p, job, "Job", req.Operation); err != nil {
		return nil, err
	}
	if err := exact(p, inv, &job.Spec.Template.Spec); err != nil {
		return nil, err
	}
	if job.Spec.ActiveDeadlineSeconds != nil && *job.Spec.ActiveDeadlineSeconds > int64(inv.Tool.Deadline.Seconds()) {
		return nil, deny("deadline", "activeDeadlineSeconds %d exceeds the tool's deadline %s", *job.Spec.ActiveDeadlineSeconds, inv.Tool.Deadline.Duration)
	}
	if job.Spec.TTLSecondsAfterFinished == nil {
		d.Warnings = append(d.Warnings, "set ttlSecondsAfterFinished so that a finished sandbox Job is removed even if its runner is gone")
	}
	if inv.Tool.RequiresApproval {
		id, warn, err := c.checkApproval(ctx, p, inv, &job.ObjectMeta, req.DryRun)
		if err != nil {
			return nil, err
		}
		d.ApprovalTokenID = id
		d.Warnings = append(d.Warnings, warn...)
	}
	return d, nil
}

// CheckPod decides on a Pod in a sandbox namespace: only the Job controller may create one, for a Job
// that exists, and the Pod must still satisfy every rule its Job did.
func (c *Checker) CheckPod(ctx context.Context, req Request, pod, old *corev1.Pod) (*Decision, error) {
	p := c.policy.Load()
	if p == nil {
		return nil, deny("policy-not-loaded", "the webhook has no valid policy yet; check its logs")
	}
	if req.Operation == "UPDATE" {
		return c.checkUpdate(&pod.ObjectMeta, &old.ObjectMeta, pod.Spec, old.Spec, pod.Labels[contract.LabelTool])
	}
	users := c.JobControllerUsers
	if len(users) == 0 {
		users = DefaultJobControllerUsers
	}
	if !slices.Contains(users, req.User) {
		return nil, deny("pods-only-from-jobs", "Pods in a sandbox namespace are created only by the Job controller, not by %s; create a Job through agent-sandbox instead", req.User)
	}
	owner := metav1.GetControllerOf(pod)
	if owner == nil || owner.Kind != "Job" || owner.APIVersion != "batch/v1" {
		return nil, deny("pods-only-from-jobs", "the Pod has no controlling Job owner reference")
	}
	if c.Jobs == nil {
		return nil, deny("owner-job", "the webhook cannot read Jobs to check this Pod's owner")
	}
	job, err := c.Jobs.GetJob(ctx, pod.Namespace, owner.Name)
	if err != nil {
		return nil, deny("owner-job", "cannot read owner Job %s: %v", owner.Name, err)
	}
	if job.UID != owner.UID {
		return nil, deny("owner-job", "owner reference names Job %s with UID %s, but that Job has UID %s", owner.Name, owner.UID, job.UID)
	}
	for _, k := range []string{contract.LabelTool, contract.LabelRequestID} {
		if pod.Labels[k] != job.Labels[k] {
			return nil, deny("owner-job", "label %s differs from the owner Job's", k)
		}
	}
	for _, k := range []string{contract.AnnotationParams, contract.AnnotationApprovalToken, contract.AnnotationInjected} {
		if pod.Annotations[k] != job.Spec.Template.Annotations[k] {
			return nil, deny("owner-job", "annotation %s differs from the owner Job's template", k)
		}
	}
	inv, err := c.invocation(p, &pod.ObjectMeta)
	if err != nil {
		return nil, err
	}
	if err := c.evaluate(ctx, p, pod, "Pod", req.Operation); err != nil {
		return nil, err
	}
	if err := exact(p, inv, &pod.Spec); err != nil {
		return nil, err
	}
	return &Decision{Tool: inv.Tool.Name}, nil
}

// invocation re-derives the call from the object's declared tool and parameters, exactly as the MCP
// server did, so scope and target namespace come from the policy and nothing else.
func (c *Checker) invocation(p *policy.Compiled, meta *metav1.ObjectMeta) (*policy.Invocation, error) {
	name, ok := meta.Labels[contract.LabelTool]
	if !ok || name == "" {
		return nil, deny("no-tool-label", "every Job in a sandbox namespace must carry the label %s naming a policy tool", contract.LabelTool)
	}
	t, err := p.Tool(name)
	if err != nil {
		return nil, deny("unknown-tool", "tool %q is not in the policy (default deny)", name)
	}
	raw, ok := meta.Annotations[contract.AnnotationParams]
	if !ok {
		return nil, deny("invalid-parameters", "annotation %s with the call's parameters is missing", contract.AnnotationParams)
	}
	params, err := decodeParams(raw)
	if err != nil {
		return nil, deny("invalid-parameters", "annotation %s: %v", contract.AnnotationParams, err)
	}
	inv, err := t.Invoke(params)
	switch {
	case errors.Is(err, policy.ErrNamespaceDenied):
		return nil, deny("namespace-not-allowed", "%v", err)
	case err != nil:
		return nil, deny("invalid-parameters", "%v", err)
	}
	return inv, nil
}

func decodeParams(raw string) (map[string]any, error) {
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.UseNumber()
	var params map[string]any
	if err := dec.Decode(&params); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	if dec.More() {
		return nil, errors.New("trailing data after the JSON object")
	}
	if params == nil {
		return nil, errors.New("not a JSON object")
	}
	return params, nil
}

// sameCorrelation requires the pod template to carry the Job's tool, request and parameters, because the
// Pod's checks read them from the Pod.
func sameCorrelation(job, tmpl *metav1.ObjectMeta) error {
	for _, k := range []string{contract.LabelTool, contract.LabelRequestID} {
		if job.Labels[k] != tmpl.Labels[k] {
			return deny("template-metadata", "the pod template's label %s must equal the Job's", k)
		}
	}
	for _, k := range []string{contract.AnnotationParams, contract.AnnotationApprovalToken} {
		if job.Annotations[k] != tmpl.Annotations[k] {
			return deny("template-metadata", "the pod template's annotation %s must equal the Job's", k)
		}
	}
	return nil
}

// jobShape requires one run: an approval admits one execution, never retries or parallel copies.
func jobShape(job *batchv1.Job) error {
	s := &job.Spec
	if s.BackoffLimit == nil || *s.BackoffLimit != 0 {
		return deny("job-shape", "a sandbox Job runs once: set backoffLimit to 0")
	}
	if s.Parallelism != nil && *s.Parallelism != 1 || s.Completions != nil && *s.Completions != 1 {
		return deny("job-shape", "a sandbox Job runs once: set parallelism and completions to 1")
	}
	if s.CompletionMode != nil && *s.CompletionMode != batchv1.NonIndexedCompletion || s.BackoffLimitPerIndex != nil || s.PodReplacementPolicy != nil && *s.PodReplacementPolicy != batchv1.Failed && *s.PodReplacementPolicy != batchv1.TerminatingOrFailed {
		return deny("job-shape", "a sandbox Job runs once: indexed completion and pod replacement are not allowed")
	}
	if s.ManualSelector != nil && *s.ManualSelector {
		return deny("job-shape", "manualSelector is not allowed on a sandbox Job")
	}
	return nil
}

func (c *Checker) evaluate(ctx context.Context, p *policy.Compiled, obj runtime.Object, kind, op string) error {
	in, err := cel.NewInput(obj, p.Settings(), op)
	if err != nil {
		return deny("decode", "cannot read the %s: %v", kind, err)
	}
	violations := p.Rules.Evaluate(ctx, in)
	if len(violations) == 0 {
		return nil
	}
	if len(violations) == 1 {
		return deny(violations[0].Rule, "%s", violations[0].Message)
	}
	parts := make([]string, len(violations))
	names := make([]string, len(violations))
	for i, v := range violations {
		parts[i] = v.Rule + ": " + v.Message
		names[i] = v.Rule
	}
	return &Denial{Rule: strings.Join(names, ","), Reason: fmt.Sprintf("%d rules failed: %s", len(violations), strings.Join(parts, "; "))}
}

// checkUpdate admits metadata-only changes (finalizers, deletion, owner references by garbage collection)
// and refuses anything that would change what runs or how it is correlated.
func (c *Checker) checkUpdate(meta, old *metav1.ObjectMeta, spec, oldSpec any, tool string) (*Decision, error) {
	if !equality.Semantic.DeepEqual(spec, oldSpec) {
		if meta.DeletionTimestamp != nil {
			return &Decision{Tool: tool}, nil
		}
		return nil, deny("immutable", "a sandbox object's spec cannot change after admission; create a new one")
	}
	for _, k := range []string{contract.LabelTool, contract.LabelRequestID} {
		if meta.Labels[k] != old.Labels[k] {
			return nil, deny("immutable", "label %s cannot change after admission", k)
		}
	}
	for _, k := range []string{contract.AnnotationParams, contract.AnnotationApprovalToken, contract.AnnotationInjected} {
		if meta.Annotations[k] != old.Annotations[k] {
			return nil, deny("immutable", "annotation %s cannot change after admission", k)
		}
	}
	return &Decision{Tool: tool}, nil
}

// checkApproval verifies the approval token and, unless the request is a dry run, consumes it. The
// token's ID is recorded in the shared ledger before the Job is admitted: a second Job with the same token,
// even one racing this one through another replica, is refused.
func (c *Checker) checkApproval(ctx context.Context, p *policy.Compiled, inv *policy.Invocation, meta *metav1.ObjectMeta, dryRun bool) (string, []string, error) {
	token := meta.Annotations[contract.AnnotationApprovalToken]
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
	now := c.Now
	if now == nil {
		now = time.Now
	}
	v := approval.NewVerifier(keys, p.Spec.ClusterID, now)
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
	if left := claims.Expiry.Sub(now()); left < 2*time.Minute {
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

// exact requires the pod spec to run exactly what the policy renders for the declared parameters: the
// tool container's image, command, environment and mounts, the injected sidecar as the webhook renders it,
// the volumes, and the tool's ServiceAccount. Security contexts and other isolation fields are the
// admission rules' business.
func exact(p *policy.Compiled, inv *policy.Invocation, got *corev1.PodSpec) error {
	tmpl, err := sandbox.RenderJob(p, sandbox.JobSpec{Invocation: inv, RequestID: "req-exact"})
	if err != nil {
		return deny("render", "%v", err)
	}
	want := &tmpl.Spec.Template.Spec
	Inject(&tmpl.Spec.Template.ObjectMeta, want, p, inv)

	if got.ServiceAccountName != want.ServiceAccountName {
		return deny("service-account", "the Pod must run as the tool's ServiceAccount %q, not %q", want.ServiceAccountName, got.ServiceAccountName)
	}
	if err := sameContainers("container", got.Containers, want.Containers); err != nil {
		return err
	}
	if err := sameContainers("init container", got.InitContainers, want.InitContainers); err != nil {
		return err
	}
	if len(got.EphemeralContainers) > 0 {
		return deny("no-ephemeral-containers", "ephemeral containers are not allowed on sandbox Pods")
	}
	return sameVolumes(got.Volumes, want.Volumes)
}

func sameContainers(what string, got, want []corev1.Container) error {
	if len(got) != len(want) {
		return deny("exact-containers", "the Pod has %d %ss %s; the policy renders %d %s", len(got), what, containerNames(got), len(want), containerNames(want))
	}
	for i := range want {
		g, w := &got[i], &want[i]
		rule := "exact-" + strings.ReplaceAll(what, " ", "-")
		switch {
		case g.Name != w.Name:
			return deny(rule, "%s %d is %q; the policy renders %q", what, i, g.Name, w.Name)
		case g.Image != w.Image:
			return deny("exact-image", "%s %s runs image %q; the policy allows only %q", what, w.Name, g.Image, w.Image)
		case !slices.Equal(g.Command, w.Command) || len(g.Args) > 0:
			return deny("exact-command", "%s %s runs %q; the policy renders %q for these parameters", what, w.Name, append(slices.Clone(g.Command), g.Args...), w.Command)
		case g.WorkingDir != w.WorkingDir:
			return deny(rule, "%s %s: workingDir must not be set", what, w.Name)
		case !equality.Semantic.DeepEqual(nilIfEmpty(g.Env), nilIfEmpty(w.Env)) || len(g.EnvFrom) > 0:
			return deny("exact-env", "%s %s: the environment must be exactly %s (no other variables, no envFrom)", what, w.Name, envNames(w.Env))
		case !sameMounts(g.VolumeMounts, w.VolumeMounts):
			return deny("exact-mounts", "%s %s: volume mounts differ from what the policy renders", what, w.Name)
		case len(g.Ports) > 0:
			return deny(rule, "%s %s: sandbox containers expose no ports", what, w.Name)
		case !equality.Semantic.DeepEqual(g.Lifecycle, w.Lifecycle) || g.Stdin || g.TTY:
			return deny(rule, "%s %s: lifecycle hooks other than the policy's, stdin and tty are not allowed", what, w.Name)
		case !equality.Semantic.DeepEqual(g.RestartPolicy, w.RestartPolicy):
			return deny(rule, "%s %s: restartPolicy differs from what the policy renders", what, w.Name)
		case !sameLimits(g.Resources, w.Resources):
			return deny("exact-resources", "%s %s: CPU and memory limits must be the policy's (%s)", what, w.Name, limitsText(w.Resources))
		case g.LivenessProbe != nil || g.ReadinessProbe != nil || g.StartupProbe != nil:
			return deny(rule, "%s %s: probes are not allowed", what, w.Name)
		}
	}
	return nil
}

func sameMounts(got, want []corev1.VolumeMount) bool {
	if len(got) != len(want) {
		return false
	}
	key := func(m corev1.VolumeMount) string {
		return fmt.Sprintf("%s|%s|%v|%s|%s", m.Name, m.MountPath, m.ReadOnly, m.SubPath, m.SubPathExpr)
	}
	g := make([]string, len(got))
	w := make([]string, len(want))
	for i := range got {
		g[i], w[i] = key(got[i]), key(want[i])
	}
	slices.Sort(g)
	slices.Sort(w)
	return slices.Equal(g, w)
}

func sameLimits(got, want corev1.ResourceRequirements) bool {
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		g, w := got.Limits[r], want.Limits[r]
		if g.Cmp(w) != 0 {
			return false
		}
	}
	return len(got.Limits) == len(want.Limits)
}

// sameVolumes compares the volume sets by name and by what each volume really is (its source identity),
// ignoring fields the API server defaults.
func sameVolumes(got, want []corev1.Volume) error {
	w := map[string]string{}
	for _, v := range want {
		w[v.Name] = volumeIdentity(v)
	}
	for _, v := range got {
		id, ok := w[v.Name]
		if !ok {
			return deny("exact-volumes", "volume %q is not one the policy renders", v.Name)
		}
		if g := volumeIdentity(v); g != id {
			return deny("exact-volumes", "volume %q is %s; the policy renders %s", v.Name, g, id)
		}
		delete(w, v.Name)
	}
	for name := range w {
		return deny("exact-volumes", "volume %q that the policy renders is missing", name)
	}
	return nil
}

func volumeIdentity(v corev1.Volume) string {
	var b bytes.Buffer
	switch {
	case v.EmptyDir != nil:
		fmt.Fprintf(&b, "emptyDir(medium=%q", v.EmptyDir.Medium)
		if v.EmptyDir.SizeLimit != nil {
			fmt.Fprintf(&b, ",sizeLimit=%s", v.EmptyDir.SizeLimit.String())
		}
		b.WriteString(")")
	case v.ConfigMap != nil:
		fmt.Fprintf(&b, "configMap(%s,items=%d)", v.ConfigMap.Name, len(v.ConfigMap.Items))
	case v.Projected != nil:
		b.WriteString("projected(")
		for _, s := range v.Projected.Sources {
			if t := s.ServiceAccountToken; t != nil {
				exp := int64(0)
				if t.ExpirationSeconds != nil {
					exp = *t.ExpirationSeconds
				}
				fmt.Fprintf(&b, "serviceAccountToken(aud=%s,exp=%d,path=%s)", t.Audience, exp, t.Path)
			} else {
				b.WriteString("other-source")
			}
		}
		b.WriteString(")")
	default:
		b.WriteString("an unsupported volume type")
	}
	return b.String()
}

func nilIfEmpty(env []corev1.EnvVar) []corev1.EnvVar {
	if len(env) == 0 {
		return nil
	}
	return env
}

func containerNames(cs []corev1.Container) string {
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = c.Name
	}
	return "[" + strings.Join(names, ", ") + "]"
}

func envNames(env []corev1.EnvVar) string {
	names := make([]string, len(env))
	for i, e := range env {
		names[i] = e.Name
	}
	return "[" + strings.Join(names, ", ") + "]"
}

func limitsText(r corev1.ResourceRequirements) string {
	cpu, mem := r.Limits[corev1.ResourceCPU], r.Limits[corev1.ResourceMemory]
	return fmt.Sprintf("cpu %s, memory %s", cpu.String(), mem.String())
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
