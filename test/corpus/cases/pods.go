package cases

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// Pod is an unsafe Pod for an admitted Job that already has its Pod: the Pod the Job controller makes from
// the Job (its template, labels and annotations, controlling owner reference and tracking finalizer),
// changed by Mutate (nil: unchanged), created with the Job controller's identity or, unless
// ByJobController, with another user's. It must be refused, naming Rule, and leave no trace in the
// webhook's Pod ledger.
type Pod struct {
	Name            string
	Rule            string
	ByJobController bool
	Mutate          func(*corev1.Pod)
}

// Pods are the unsafe Pods.
func Pods() []Pod {
	jc := func(name, rule string, m func(*corev1.Pod)) Pod {
		return Pod{Name: name, Rule: rule, ByJobController: true, Mutate: m}
	}
	return []Pod{
		{Name: "Pod created directly", Rule: "pods-only-from-jobs", Mutate: func(p *corev1.Pod) { p.OwnerReferences, p.Finalizers = nil, nil }},
		{Name: "Pod with a forged owner reference", Rule: "pods-only-from-jobs"},
		jc("second Pod for an admitted Job, as the Job controller", "one-pod-per-job", nil),
		jc("Pod without an owner, as the Job controller", "pods-only-from-jobs", func(p *corev1.Pod) { p.OwnerReferences = nil }),
		jc("Pod owned by another UID under the Job's name, as the Job controller", "owner-job", func(p *corev1.Pod) {
			p.OwnerReferences[0].UID = "0f6b8a4e-1c2d-4e5f-8a9b-000000000000"
		}),
		// The API server refuses a Pod that names a RuntimeClass it does not have; one that names none reaches
		// the webhook.
		jc("Pod without a runtime class, as the Job controller", "runtime-class", func(p *corev1.Pod) { p.Spec.RuntimeClassName = nil }),
		jc("Pod with a deadline above the policy, as the Job controller", "deadline", func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = ptr.To(int64(86400)) }),
		jc("Pod with another command, as the Job controller", "exact-command", func(p *corev1.Pod) {
			p.Spec.Containers[0].Command = []string{"/bin/sh", "-c", "cat /var/run/agent-sandbox/credentials/kubeconfig"}
		}),
		// The priority is the class's, as the API server's Priority admission sets it.
		jc("Pod with priority class system-node-critical, as the Job controller", "exact-pod-spec", func(p *corev1.Pod) {
			p.Spec.PriorityClassName = "system-node-critical"
			p.Spec.Priority = ptr.To(int32(2000001000))
		}),
		jc("Pod with an extra toleration, as the Job controller", "exact-pod-spec", func(p *corev1.Pod) {
			p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Operator: corev1.TolerationOpExists})
		}),
		jc("Pod bound to a node at creation, as the Job controller", "exact-pod-spec", func(p *corev1.Pod) { p.Spec.NodeName = "control-plane" }),
		jc("Pod with an extra annotation, as the Job controller", "exact-metadata", func(p *corev1.Pod) {
			if p.Annotations == nil {
				p.Annotations = map[string]string{}
			}
			p.Annotations["example.com/note"] = "x"
		}),
	}
}
