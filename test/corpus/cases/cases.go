// Package cases declares, once, the adversarial cases of the admission corpus that are pure data: an
// unsafe change to a sandbox Job, Pod or approval and the refusal it must meet. Three suites run them: the
// corpus (test/corpus) submits each to a real API server with the webhook registered — in the
// integration tests and in `make verify` —, the webhook's unit tests decide each with the Checker, and
// the CEL unit tests evaluate the ones that the policy's rules refuse.
//
// It imports only Kubernetes API types and the two leaf packages internal/contract and internal/approval:
// cel and webhook import it from their own tests, and test/corpus, which imports both, could not be.
package cases

import (
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
)

// Tool is the read tool whose Job the Job and Pod cases change; PodParams are its parameters.
const Tool = "k8s_get_pod_status"

// ApplyTool is the tool the approval cases attack: it always needs a signed approval.
const ApplyTool = "terraform_apply"

// PodParams are valid parameters of Tool.
func PodParams() map[string]any { return map[string]any{"namespace": "demo-app"} }

// ApplyParams are valid ApplyTool parameters for a made-up plan.
func ApplyParams() map[string]any {
	return map[string]any{"workspace": "k8s-demo", "plan_id": strings.Repeat("ab", 32)}
}

// Base is the Job a case changes.
type Base int

const (
	// Submitted is the Job the MCP server submits for Tool and PodParams: rendered by the policy, before the
	// webhook's injection. The mutating webhook injects the credential agent after the case's change, as it
	// would for any Job.
	Submitted Base = iota
	// Injected is the same Job after the injection, with the credential agent as its first init container:
	// for changes to what the webhook adds, or to fields its hardening would otherwise fill in. The
	// mutating webhook leaves such a Job alone (it carries the injected marker).
	Injected
)

// Job is an unsafe Job: Base changed by Mutate must be refused, naming Rule.
type Job struct {
	// Class groups cases in reports: isolation, exactness or job-shape.
	Class string
	Name  string
	// Rule is the refusal's rule exactly as the webhook names it: one rule ID or, where several of the
	// policy's rules fail, their names joined by commas in the policy's order.
	Rule   string
	Base   Base
	Mutate func(*batchv1.Job)
}

// spec, tool and sidecar address the parts of a Job that the cases change: the pod spec, the tool
// container and (on an Injected Job) the credential agent.
func spec(j *batchv1.Job) *corev1.PodSpec      { return &j.Spec.Template.Spec }
func tool(j *batchv1.Job) *corev1.Container    { return &j.Spec.Template.Spec.Containers[0] }
func sidecar(j *batchv1.Job) *corev1.Container { return &j.Spec.Template.Spec.InitContainers[0] }
func podSC(j *batchv1.Job) *corev1.PodSecurityContext {
	return j.Spec.Template.Spec.SecurityContext
}

// volume is the Job's volume named name; the case is wrong if there is none.
func volume(j *batchv1.Job, name string) *corev1.Volume {
	for i := range spec(j).Volumes {
		if spec(j).Volumes[i].Name == name {
			return &spec(j).Volumes[i]
		}
	}
	panic("cases: the Job has no volume " + name)
}

// vaultToken is the projected Vault-audience token of an Injected Job.
func vaultToken(j *batchv1.Job) *corev1.ServiceAccountTokenProjection {
	return volume(j, contract.VaultTokenVolume).Projected.Sources[0].ServiceAccountToken
}

// lifecycle is c's lifecycle, made if it has none.
func lifecycle(c *corev1.Container) *corev1.Lifecycle {
	if c.Lifecycle == nil {
		c.Lifecycle = &corev1.Lifecycle{}
	}
	return c.Lifecycle
}

func setParams(j *batchv1.Job, p string) {
	j.Annotations[contract.AnnotationParams] = p
	j.Spec.Template.Annotations[contract.AnnotationParams] = p
}

func exec(cmd ...string) *corev1.ExecAction { return &corev1.ExecAction{Command: cmd} }
