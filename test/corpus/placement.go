package corpus

import (
	"maps"
	"slices"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/agent-sandbox/agent-sandbox/test/corpus/cases"
)

func podSpec(j *batchv1.Job) *corev1.PodSpec { return &j.Spec.Template.Spec }

// PlacementCases move a sandbox Pod off the nodes the policy places it on (spec.sandbox.nodeSelector and
// tolerations: on GKE the gVisor node pool, labelled and tainted sandbox.gke.io/runtime=gvisor:NoSchedule),
// or let it onto more nodes. Such a Job is refused at admission, not left Pending behind a taint: the
// node-placement rule refuses one that lacks the policy's placement, exactness one that adds to it. Two
// cases hold under any policy; the others need a policy with a placement (make up PROFILE=gke, the
// integration suite's placed policy) and are left out without one.
func (e *Env) PlacementCases() []Case {
	pod := func() *batchv1.Job { return e.Job(cases.Tool, cases.PodParams(), "") }
	c := func(name, rule string, m func(*batchv1.Job)) Case { return e.jobCase("placement", name, rule, m, pod) }
	sb := e.Policy.Spec.Sandbox
	cases := []Case{
		c("extra nodeSelector entry pinning a node", "exact-pod-spec", func(j *batchv1.Job) {
			if podSpec(j).NodeSelector == nil {
				podSpec(j).NodeSelector = map[string]string{}
			}
			podSpec(j).NodeSelector["kubernetes.io/hostname"] = "control-plane"
		}),
		c("extra toleration of every taint (operator Exists, no key)", "exact-pod-spec", func(j *batchv1.Job) {
			podSpec(j).Tolerations = append(podSpec(j).Tolerations, corev1.Toleration{Operator: corev1.TolerationOpExists})
		}),
	}
	if len(sb.NodeSelector) > 0 {
		key := slices.Sorted(maps.Keys(sb.NodeSelector))[0]
		cases = append(cases,
			c("without the policy's nodeSelector", "node-placement", func(j *batchv1.Job) { podSpec(j).NodeSelector = nil }),
			c("the policy's nodeSelector with another value", "node-placement", func(j *batchv1.Job) {
				podSpec(j).NodeSelector[key] = podSpec(j).NodeSelector[key] + "-not"
			}),
		)
	}
	if len(sb.Tolerations) > 0 {
		cases = append(cases,
			c("without the policy's tolerations", "node-placement", func(j *batchv1.Job) { podSpec(j).Tolerations = nil }),
			c("the policy's toleration swapped for one of every taint", "node-placement", func(j *batchv1.Job) {
				podSpec(j).Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
			}),
			c("the policy's toleration widened to any value of its key (operator Exists)", "node-placement", func(j *batchv1.Job) {
				t := &podSpec(j).Tolerations[0]
				t.Operator, t.Value = corev1.TolerationOpExists, ""
			}),
			c("the policy's toleration with another effect", "node-placement", func(j *batchv1.Job) {
				podSpec(j).Tolerations[0].Effect = corev1.TaintEffectNoExecute
			}),
		)
	}
	return cases
}
