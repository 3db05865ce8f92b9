package sandbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
)

// A warm Job's name is the tool's Job prefix, "w" and 11 base32hex characters. Request IDs use the base32hex
// alphabet (0-9a-v), which has no "w": a warm Job's name can never be a call's Job's name.
var warmSuffixRE = regexp.MustCompile(`^w[0-9a-v]{11}$`)

// NewWarmSuffix returns a random suffix for a warm Job's name.
func NewWarmSuffix() (string, error) {
	b := make([]byte, 11)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	const alphabet = "0123456789abcdefghijklmnopqrstuv"
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return "w" + string(b), nil
}

// WarmJobName is the name of a warm Job of tool with suffix (from NewWarmSuffix).
func WarmJobName(tool, suffix string) string { return JobNamePrefix(tool) + suffix }

// WarmSuffix returns the suffix of a warm Job's name, or false if name is not one for tool.
func WarmSuffix(tool, name string) (string, bool) {
	s, ok := strings.CutPrefix(name, JobNamePrefix(tool))
	return s, ok && warmSuffixRE.MatchString(s)
}

// RenderWarmJob builds a warm Job of tool (before the webhook injects the credential agent): the tool's
// Pod, started before any call, whose tool container runs the trusted warm entry point instead of the
// tool's argv. It waits for one claim (AnnotationClaim, delivered through the ClaimVolume), verifies the
// webhook's signature of it and that its argv is the policy's rendering of its parameters, executes exactly
// that argv with the tool's deadline, and exits; unclaimed, it exits after the pool's idle timeout.
func RenderWarmJob(p *policy.Compiled, t *policy.Tool, suffix string) (*batchv1.Job, error) {
	if t.WarmPool == nil {
		return nil, fmt.Errorf("tool %s has no warm pool", t.Name)
	}
	if !warmSuffixRE.MatchString(suffix) {
		return nil, fmt.Errorf("warm Job suffix %q is not w and 11 base32hex characters", suffix)
	}
	sb := &p.Spec.Sandbox
	idle := int64(t.WarmPool.IdleTimeout.Seconds())
	deadline := int64(t.Deadline.Seconds())
	total := idle + deadline
	labels := map[string]string{contract.LabelTool: t.Name, contract.LabelWarm: "true"}
	mounts := []corev1.VolumeMount{
		{Name: contract.TmpVolume, MountPath: contract.TmpDir},
		{Name: contract.ResultVolume, MountPath: contract.ResultDir},
		{Name: contract.ClaimVolume, MountPath: contract.ClaimDir, ReadOnly: true},
	}
	volumes := append(ToolVolumes(t, &policy.Invocation{Tool: t}), ClaimVolume())
	command := []string{"/agent-sandbox", "run", "warm", "--tool=" + t.Name,
		"--claim-file=" + contract.ClaimPath, "--done-file=" + contract.DonePath,
		"--idle-timeout=" + strconv.FormatInt(idle, 10) + "s", "--deadline=" + strconv.FormatInt(deadline, 10) + "s",
		// The entry point renders the claim's parameters itself and runs only that argv; the webhook's
		// injection adds --claim-keys, the public keys the claim's signature must verify with.
		"--claim-spec=" + t.ClaimSpec().String()}
	return toolJob(WarmJobName(t.Name, suffix), sb.Namespace, labels, nil, total, toolPodSpec(sb, t, command, mounts, volumes)), nil
}

// ClaimVolume exposes a warm Pod's claim annotation as the file "claim" (empty until the Pod is claimed),
// the webhook's signature of it as "claim-signature", and the Pod's own namespace, name and UID, which the
// signature is bound to. The kubelet writes all files of the volume in one atomic swap, so the claim and
// its signature, added by one UPDATE, appear together.
func ClaimVolume() corev1.Volume {
	field := func(path, fieldPath string) corev1.DownwardAPIVolumeFile {
		return corev1.DownwardAPIVolumeFile{Path: path, FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: fieldPath}}
	}
	return corev1.Volume{Name: contract.ClaimVolume, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		DefaultMode: ptr.To(int32(0o444)),
		Sources: []corev1.VolumeProjection{{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
			field("claim", "metadata.annotations['"+contract.AnnotationClaim+"']"),
			field(contract.ClaimSignatureFile, "metadata.annotations['"+contract.AnnotationClaimSignature+"']"),
			field(contract.PodNamespaceFile, "metadata.namespace"),
			field(contract.PodNameFile, "metadata.name"),
			field(contract.PodUIDFile, "metadata.uid"),
		}}}},
	}}}
}

// Claim is the one call a warm Pod serves, as the annotation AnnotationClaim holds it. The webhook admits
// the annotation only if it is byte for byte the rendering of RenderClaim for the claim's own tool,
// parameters, request ID and token, so the argv and namespace in it are the policy's.
type Claim struct {
	RequestID string `json:"requestID"`
	Tool      string `json:"tool"`
	// Namespace is the target namespace the credential is minted for.
	Namespace string `json:"namespace"`
	// Params are the call's canonical parameters.
	Params json.RawMessage `json:"params"`
	// Argv is what the warm entry point executes: the policy's rendering of Params.
	Argv []string `json:"argv"`
	// ApprovalToken holds the signed approvals, for tools that need them: one token, or several approvers'
	// joined as in contract.AnnotationApprovalToken.
	ApprovalToken string `json:"approvalToken,omitempty"`
	// AuditHead is the head of the MCP server's audit chain when it claimed the Pod, as on a cold call's
	// Job (contract.AnnotationAuditHead); the webhook records it as the call's audit anchor.
	AuditHead string `json:"auditHead"`
}

// MaxClaimBytes bounds a claim: an approval token is under a kilobyte, and a call that needs several
// approvers carries up to approval.MaxApprovers of them; parameters are short scalars.
const MaxClaimBytes = 32 << 10

// RenderClaim is the claim annotation for an accepted invocation: deterministic, so the webhook can compare
// it byte for byte. tokens are the call's approvals (as in JobSpec), auditHead is the audit chain's head
// (audit.Log.Head).
func RenderClaim(inv *policy.Invocation, requestID string, tokens []string, auditHead string) (string, error) {
	params, err := approval.CanonicalParams(inv.Params)
	if err != nil {
		return "", fmt.Errorf("render claim: %w", err)
	}
	c := Claim{RequestID: requestID, Tool: inv.Tool.Name, Namespace: inv.TargetNamespace, Params: params, Argv: inv.Argv,
		ApprovalToken: contract.JoinApprovalTokens(tokens), AuditHead: auditHead}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(c); err != nil {
		return "", fmt.Errorf("render claim: %w", err)
	}
	return strings.TrimSuffix(buf.String(), "\n"), nil
}

// ParseClaim decodes a claim strictly: unknown fields, trailing data, a missing field or an oversized claim
// are errors.
func ParseClaim(s string) (*Claim, error) {
	if len(s) > MaxClaimBytes {
		return nil, fmt.Errorf("the claim is %d bytes, more than %d", len(s), MaxClaimBytes)
	}
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	var c Claim
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("the claim is not a claim object: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("the claim has data after its object")
	}
	switch {
	case c.RequestID == "", c.Tool == "", c.Namespace == "", len(c.Params) == 0, len(c.Argv) == 0:
		return nil, fmt.Errorf("the claim lacks a request ID, tool, namespace, parameters or argv")
	}
	return &c, nil
}

// CallJobs lists the sandbox Jobs in namespace that serve calls: cold Jobs and claimed warm Jobs, not the
// pool's unclaimed warm Jobs. Leak checks (chaos, soak, e2e) count these.
func CallJobs(ctx context.Context, c kubernetes.Interface, namespace string) ([]string, error) {
	jobs, err := c.BatchV1().Jobs(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	pods, err := c.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	claimed := map[string]bool{}
	for _, p := range pods.Items {
		if p.Annotations[contract.AnnotationClaim] != "" {
			claimed[p.Labels[batchv1.JobNameLabel]] = true
		}
	}
	var out []string
	for _, j := range jobs.Items {
		if _, warm := j.Labels[contract.LabelWarm]; !warm || claimed[j.Name] {
			out = append(out, j.Name)
		}
	}
	return out, nil
}
