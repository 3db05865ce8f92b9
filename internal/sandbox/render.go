// Package sandbox renders and runs sandbox Jobs: one throwaway Kubernetes Job per tool call, under gVisor,
// hardened, with a deadline. The MCP server renders the Job from the policy's template; the admission
// webhook renders it again from the Job's declared parameters and admits it only if the two agree, so the
// rendering here is the single definition of what a tool may run.
package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
)

// Limits of the writable scratch space every tool gets at /tmp (root file systems are read-only).
var tmpSizeLimit = resource.MustParse("512Mi")

// ttlAfterFinished lets Kubernetes remove a finished Job whose runner died before deleting it.
const ttlAfterFinished = int32(3600)

// JobSpec is what RenderJob needs besides the policy: the accepted invocation and its correlation.
type JobSpec struct {
	Invocation *policy.Invocation
	// RequestID correlates the Job with the MCP call and the audit trail ("req-…").
	RequestID string
	// ApprovalTokens are the signed approvals for tools that need them: one per approver, in the order the
	// approvals store returns them. The Job carries them joined (contract.JoinApprovalTokens).
	ApprovalTokens []string
	// AuditHead is the head of the MCP server's audit chain when it creates the Job (audit.Log.Head); the
	// webhook records it as the call's audit anchor. It goes on the Job's own annotations only.
	AuditHead string
}

// JobName is the Job's name for a tool call: short, DNS-safe, unique per request. A Job that carries
// approval tokens is named after them instead (ApprovalJobName), so the name of an approved call can be
// neither guessed nor taken by another Job before it: a Job of that name must carry those very tokens.
func JobName(tool, requestID string) string {
	t := strings.ReplaceAll(tool, "_", "-")
	if len(t) > 30 {
		t = t[:30]
	}
	id := strings.TrimPrefix(requestID, "req-")
	if len(id) > 24 {
		id = id[:24]
	}
	return strings.TrimRight("as-"+t, "-") + "-" + strings.ToLower(id)
}

// JobNamePrefix starts the name of every Job of tool, and so of every Pod of those Jobs.
func JobNamePrefix(tool string) string { return JobName(tool, "req-") }

// ApprovalJobName is the name of the Job whose approval-token annotation is token (one token, or several
// joined by contract.JoinApprovalTokens): the tool and the first 24 hex characters of its SHA-256.
func ApprovalJobName(tool, token string) string {
	sum := sha256.Sum256([]byte(token))
	return JobName(tool, "req-"+hex.EncodeToString(sum[:])[:24])
}

// RenderJob builds the sandbox Job for one accepted invocation, before the webhook injects the credential
// agent. Everything that matters for isolation is set explicitly; the webhook checks it anyway.
func RenderJob(p *policy.Compiled, js JobSpec) (*batchv1.Job, error) {
	inv := js.Invocation
	if len(js.ApprovalTokens) > 0 {
		// The approvers the tokens name are rendered into the argv ({{approvers}}): the apply's check
		// container counts them against the plan's two-person rules. One rendering, for the MCP server that
		// attaches the tokens and for the webhook that verifies them.
		withApprovers := *inv
		withApprovers.SetApprovers(approval.ClaimedApprovers(js.ApprovalTokens))
		inv = &withApprovers
	}
	t := inv.Tool
	params, err := approval.CanonicalParams(inv.Params)
	if err != nil {
		return nil, fmt.Errorf("render %s: %w", t.Name, err)
	}
	labels := map[string]string{contract.LabelTool: t.Name, contract.LabelRequestID: js.RequestID}
	annotations := map[string]string{contract.AnnotationParams: string(params)}
	name := JobName(t.Name, js.RequestID)
	if token := contract.JoinApprovalTokens(js.ApprovalTokens); token != "" {
		annotations[contract.AnnotationApprovalToken] = token
		name = ApprovalJobName(t.Name, token)
	}
	sb := &p.Spec.Sandbox
	deadline := int64(t.Deadline.Seconds())

	podSpec := toolPodSpec(sb, t, inv.Argv, ToolVolumeMounts(t), ToolVolumes(t, inv))
	if len(inv.CheckArgv) > 0 {
		// The check runs before the credential agent (which the webhook appends to the init containers):
		// an input it refuses never gets a credential. It sees the inputs and scratch space, never the
		// credential or the result volume; its reason is its termination message.
		podSpec.InitContainers = []corev1.Container{{
			Name:                     contract.CheckContainer,
			Image:                    t.Image,
			ImagePullPolicy:          corev1.PullIfNotPresent,
			Command:                  KubeletLiteral(inv.CheckArgv),
			Resources:                Resources(t.Resources),
			SecurityContext:          HardenedContainerSecurityContext(),
			TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			// Scratch space too: judging a saved plan by the policy's plan rules runs terraform show in it.
			VolumeMounts: append([]corev1.VolumeMount{{Name: contract.TmpVolume, MountPath: contract.TmpDir}}, inputMounts(t)...),
		}}
	}
	job := toolJob(name, sb.Namespace, labels, annotations, deadline, podSpec)
	if js.AuditHead != "" {
		job.Annotations[contract.AnnotationAuditHead] = js.AuditHead
	}
	return job, nil
}

// KubeletLiteral writes argv so that the kubelet's expansion of a container's command gives argv back: it
// replaces $(NAME) with a variable's value and $$ with $ before the program starts, so each $ is doubled.
// Found live (2026-12-07): the policy's plan rules, rendered into the plan and apply checks' arguments,
// hold '$$' (plan-command-literal); the kubelet made it '$', and the rule the sandbox enforced let through
// the plan the policy's rule refuses. What the webhook compares and approves is then exactly what runs.
func KubeletLiteral(argv []string) []string {
	if argv == nil {
		return nil
	}
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = strings.ReplaceAll(a, "$", "$$")
	}
	return out
}

// toolPodSpec is the Pod of a tool's Job, cold or warm, before the webhook injects the credential agent: the
// isolation every sandbox Pod has, and one tool container running command.
func toolPodSpec(sb *policy.Sandbox, t *policy.Tool, command []string, mounts []corev1.VolumeMount, volumes []corev1.Volume) corev1.PodSpec {
	return corev1.PodSpec{
		RuntimeClassName:             ptr.To(sb.RuntimeClassName),
		RestartPolicy:                corev1.RestartPolicyNever,
		ServiceAccountName:           t.ServiceAccount,
		AutomountServiceAccountToken: ptr.To(false),
		EnableServiceLinks:           ptr.To(false),
		NodeSelector:                 copyMap(sb.NodeSelector),
		Tolerations:                  append([]corev1.Toleration(nil), sb.Tolerations...),
		SecurityContext: &corev1.PodSecurityContext{
			RunAsNonRoot:   ptr.To(true),
			RunAsUser:      ptr.To(sb.RunAsUser),
			RunAsGroup:     ptr.To(sb.RunAsUser),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		Containers: []corev1.Container{{
			Name:                     contract.ToolContainer,
			Image:                    t.Image,
			ImagePullPolicy:          corev1.PullIfNotPresent,
			Command:                  KubeletLiteral(command),
			Resources:                Resources(t.Resources),
			SecurityContext:          HardenedContainerSecurityContext(),
			TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			VolumeMounts:             mounts,
		}},
		Volumes: volumes,
	}
}

// toolJob wraps a tool's Pod in its Job: one run, never retried, never parallel, gone an hour after it ends.
func toolJob(name, namespace string, labels, annotations map[string]string, deadline int64, pod corev1.PodSpec) *batchv1.Job {
	var podAnnotations map[string]string
	if annotations != nil {
		podAnnotations = copyMap(annotations)
	}
	return &batchv1.Job{
		TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Namespace:   namespace,
			Labels:      labels,
			Annotations: annotations,
		},
		Spec: batchv1.JobSpec{
			// One approval, one run: never retried, never parallel.
			BackoffLimit:            ptr.To(int32(0)),
			Completions:             ptr.To(int32(1)),
			Parallelism:             ptr.To(int32(1)),
			ActiveDeadlineSeconds:   &deadline,
			TTLSecondsAfterFinished: ptr.To(ttlAfterFinished),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: copyMap(labels), Annotations: podAnnotations},
				Spec:       pod,
			},
		},
	}
}

// ToolVolumeMounts are the tool container's mounts before injection: scratch space, the result volume it
// writes its result into and, for tools that take them, the read-only workspace and saved plan.
func ToolVolumeMounts(t *policy.Tool) []corev1.VolumeMount {
	m := []corev1.VolumeMount{
		{Name: contract.TmpVolume, MountPath: contract.TmpDir},
		{Name: contract.ResultVolume, MountPath: contract.ResultDir},
	}
	return append(m, inputMounts(t)...)
}

// inputMounts are the read-only inputs of a tool: its workspace and its saved plan.
func inputMounts(t *policy.Tool) []corev1.VolumeMount {
	var m []corev1.VolumeMount
	if t.Workspace != nil {
		m = append(m, corev1.VolumeMount{Name: contract.WorkspaceVolume, MountPath: t.Workspace.MountPath, ReadOnly: true})
	}
	if t.Plan != nil {
		m = append(m, corev1.VolumeMount{Name: contract.PlanVolume, MountPath: t.Plan.MountPath, ReadOnly: true})
	}
	return m
}

// resultSizeLimit bounds a tool's result (a saved plan travels in it, base64).
var resultSizeLimit = resource.MustParse("8Mi")

// ToolVolumes are the pod's volumes before injection.
func ToolVolumes(t *policy.Tool, inv *policy.Invocation) []corev1.Volume {
	v := []corev1.Volume{
		{Name: contract.TmpVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &tmpSizeLimit}}},
		{Name: contract.ResultVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
			Medium: corev1.StorageMediumMemory, SizeLimit: &resultSizeLimit}}},
	}
	cm := func(name, configMap string) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: configMap},
			DefaultMode:          ptr.To(int32(0o444)),
		}}}
	}
	if t.Workspace != nil {
		v = append(v, cm(contract.WorkspaceVolume, inv.Workspace))
	}
	if t.Plan != nil {
		v = append(v, cm(contract.PlanVolume, inv.PlanConfigMap))
	}
	return v
}

// HardenedContainerSecurityContext is the security context of every sandbox container.
func HardenedContainerSecurityContext() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		RunAsNonRoot:             ptr.To(true),
		Privileged:               ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// Resources sets the limits of r, and requests equal to them except for CPU when the policy asks for a
// smaller CPU request: memory is never overcommitted, CPU may burst up to its limit.
func Resources(r policy.Resources) corev1.ResourceRequirements {
	l := corev1.ResourceList{corev1.ResourceCPU: r.CPU, corev1.ResourceMemory: r.Memory}
	req := l.DeepCopy()
	if r.CPURequest != nil {
		req[corev1.ResourceCPU] = r.CPURequest.DeepCopy()
	}
	return corev1.ResourceRequirements{Limits: l, Requests: req}
}

func copyMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
