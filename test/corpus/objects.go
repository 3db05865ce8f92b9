package corpus

import (
	"context"
	"fmt"
	"maps"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	appsv1client "k8s.io/client-go/kubernetes/typed/apps/v1"
	batchv1client "k8s.io/client-go/kubernetes/typed/batch/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/test/corpus/cases"
)

type appsInterface = appsv1client.AppsV1Interface

var dryRun = []string{metav1.DryRunAll}

// updateCases change an admitted Job afterwards: the changes of test/corpus/cases, with every kind of patch
// and an update.
func (e *Env) updateCases(job *batchv1.Job) []Case {
	ns, name := job.Namespace, job.Name
	jobs := func() batchv1client.JobInterface { return e.Attacker.BatchV1().Jobs(ns) }
	var out []Case
	for _, c := range cases.JobChanges() {
		submit := func(ctx context.Context) error {
			_, err := jobs().Patch(ctx, name, c.Patch, []byte(c.Body), metav1.PatchOptions{})
			return err
		}
		if c.Patch == "" {
			submit = func(ctx context.Context) error {
				// Read and write again while the Job controller's own status writes win the race (a conflict is
				// the API server's answer before admission, not the webhook's): the update must reach the webhook.
				return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
					cur, err := jobs().Get(ctx, name, metav1.GetOptions{})
					if err != nil {
						return err
					}
					c.Update(cur)
					_, err = jobs().Update(ctx, cur, metav1.UpdateOptions{})
					return err
				})
			}
		}
		out = append(out, Case{Class: "update", Name: c.Name, Rule: cases.Immutable, Submit: submit})
	}
	return out
}

// podCases attack the Pods of an admitted Job: more Pods, changed Pods, subresources.
func (e *Env) podCases(job *batchv1.Job, pod *corev1.Pod) []Case {
	ns := pod.Namespace
	// podFrom builds a Pod from the admitted Job's template exactly as the Job controller does (its
	// labels, owner reference and tracking finalizer), so that a refusal is about what a case changes, and
	// not about the Pod's shape. Each Pod has its own copies, for a case to change.
	podFrom := func() *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: job.Name + "-", Labels: maps.Clone(job.Spec.Template.Labels),
			Annotations:     maps.Clone(job.Spec.Template.Annotations),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: job.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
			Finalizers:      []string{"batch.kubernetes.io/job-tracking"}},
			Spec: *job.Spec.Template.Spec.DeepCopy()}
	}
	patchPod := func(pt types.PatchType, body string) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			_, err := e.Attacker.CoreV1().Pods(ns).Patch(ctx, pod.Name, pt, []byte(body), metav1.PatchOptions{})
			return err
		}
	}
	connect := func(sub string, params ...string) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			r := e.Attacker.CoreV1().RESTClient().Post().Namespace(ns).Resource("pods").Name(pod.Name).SubResource(sub)
			for i := 0; i+1 < len(params); i += 2 {
				r = r.Param(params[i], params[i+1])
			}
			return r.Do(ctx).Error()
		}
	}
	// The Pod cases of test/corpus/cases: the Job's Pod, changed, as the Job controller or as the attacker.
	var out []Case
	for _, c := range cases.Pods() {
		out = append(out, Case{Class: "pod", Name: c.Name, Rule: c.Rule, Submit: func(ctx context.Context) error {
			p := podFrom()
			if c.Mutate != nil {
				c.Mutate(p)
			}
			as := e.Attacker
			if c.ByJobController {
				as = e.JobController
			}
			_, err := as.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
			return err
		}})
	}
	for _, c := range cases.PodChanges() {
		out = append(out, Case{Class: "pod", Name: c.Name, Rule: cases.Immutable, Submit: patchPod(c.Patch, c.Body)})
	}
	return append(append(out, []Case{
		{Class: "pod", Name: "Pod for a finished Job, as the Job controller", Rule: "owner-job", Submit: func(ctx context.Context) error {
			j, err := e.createJobAs(ctx, e.MCP, e.Job("k8s_get_pod_status", PodParams(), ""), false)
			if err != nil {
				return fmt.Errorf("setup: %w", err)
			}
			if err := e.FinishJob(ctx, j); err != nil {
				return fmt.Errorf("setup: %w", err)
			}
			j, err = e.Admin.BatchV1().Jobs(ns).Get(ctx, j.Name, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("setup: %w", err)
			}
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: j.Name + "-", Labels: j.Spec.Template.Labels, Annotations: j.Spec.Template.Annotations,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: j.Name, UID: j.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
				Finalizers:      []string{"batch.kubernetes.io/job-tracking"}},
				Spec: *j.Spec.Template.Spec.DeepCopy()}
			_, err = e.JobController.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
			return err
		}},
		{Class: "subresource", Name: "exec into a sandbox Pod", Rule: "no-pod-access", Submit: connect("exec",
			"container", contract.ToolContainer, "command", "cat", "command", contract.KubeconfigPath, "stdout", "true")},
		{Class: "subresource", Name: "attach to a sandbox Pod", Rule: "no-pod-access", Submit: connect("attach", "container", contract.ToolContainer, "stdout", "true")},
		{Class: "subresource", Name: "port-forward into a sandbox Pod", Rule: "no-pod-access", Submit: connect("portforward", "ports", "8080")},
		{Class: "subresource", Name: "proxy to a sandbox Pod", Rule: "no-pod-access", Submit: func(ctx context.Context) error {
			return e.Attacker.CoreV1().RESTClient().Get().Namespace(ns).Resource("pods").Name(pod.Name + ":8080").SubResource("proxy").Do(ctx).Error()
		}},
		{Class: "subresource", Name: "ephemeral container on a sandbox Pod", Rule: "no-ephemeral-containers", Submit: func(ctx context.Context) error {
			p, err := e.Attacker.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			// A debug container that passes Pod Security "restricted", so that the refusal is agent-sandbox's.
			p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
				Name: "debug", Image: "localhost/busybox:agent-sandbox", Command: []string{"sh"}, SecurityContext: sandbox.HardenedContainerSecurityContext()}})
			_, err = e.Attacker.CoreV1().Pods(ns).UpdateEphemeralContainers(ctx, p.Name, p, metav1.UpdateOptions{})
			return err
		}},
		// More than the policy gives, less than the node has: Kubernetes 1.37 refuses a resize past the node's
		// allocatable before admission, so a bigger one would never reach the webhook.
		{Class: "subresource", Name: "resize a sandbox Pod to 500m CPU / 256Mi", Rule: "no-pod-resize", Submit: func(ctx context.Context) error {
			p, err := e.Attacker.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			for i := range p.Spec.Containers {
				l := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("256Mi")}
				p.Spec.Containers[i].Resources = corev1.ResourceRequirements{Limits: l, Requests: l}
			}
			_, err = e.Attacker.CoreV1().Pods(ns).UpdateResize(ctx, p.Name, p, metav1.UpdateOptions{})
			return err
		}},
		{Class: "subresource", Name: "bind a sandbox Pod to a node, not as the scheduler", Rule: "pod-binding", Submit: func(ctx context.Context) error {
			b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod.Name}, Target: corev1.ObjectReference{Kind: "Node", Name: "control-plane"}}
			return e.Attacker.CoreV1().Pods(ns).Bind(ctx, b, metav1.CreateOptions{})
		}},
	}...), e.bindingMetadataCases(pod)...)
}

// bindingMetadataCases rewrite a sandbox Pod's metadata through its Binding, as the scheduler (impersonated):
// the API server copies a Binding's annotations, and since Kubernetes 1.35 its labels, onto the Pod. Server-side
// dry runs: the webhook decides before the API server looks at the Pod (a bound one included).
func (e *Env) bindingMetadataCases(pod *corev1.Pod) []Case {
	ns := pod.Namespace
	bind := func(labels, annotations map[string]string) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Labels: labels, Annotations: annotations},
				Target: corev1.ObjectReference{Kind: "Node", Name: e.nodeOf(pod)}}
			return e.Scheduler().CoreV1().Pods(ns).Bind(ctx, b, metav1.CreateOptions{DryRun: dryRun})
		}
	}
	// The legacy core v1 bindings resource: the same binding code, without a subresource.
	legacy := func(c kubernetes.Interface, labels, annotations map[string]string) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			b := &corev1.Binding{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Binding"}, ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Labels: labels, Annotations: annotations},
				Target: corev1.ObjectReference{Kind: "Node", Name: e.nodeOf(pod)}}
			return c.CoreV1().RESTClient().Post().Namespace(ns).Resource("bindings").Param("dryRun", metav1.DryRunAll).Body(b).Do(ctx).Error()
		}
	}
	return []Case{
		{Class: "subresource", Name: "cluster-wide admin binds a sandbox Pod through the legacy bindings resource (not the scheduler)", Rule: "pod-binding",
			Submit: legacy(e.Attacker, nil, nil)},
		{Class: "subresource", Name: "the scheduler's legacy Binding (bindings resource) of a sandbox Pod forges a claim annotation", Rule: "pod-binding",
			Submit: legacy(e.Scheduler(), nil, map[string]string{contract.AnnotationClaim: `{"requestID":"req-forged` + e.Run + `","argv":["/agent-sandbox","version"]}`})},
		{Class: "subresource", Name: "the scheduler's Binding of a sandbox Pod forges a claim annotation", Rule: "pod-binding",
			Submit: bind(nil, map[string]string{contract.AnnotationClaim: `{"requestID":"req-forged` + e.Run + `","argv":["/agent-sandbox","version"]}`})},
		{Class: "subresource", Name: "the scheduler's Binding of a sandbox Pod changes its tool label", Rule: "pod-binding",
			Submit: bind(map[string]string{contract.LabelTool: "terraform_apply"}, nil)},
	}
}

// tokenRequestCases ask the API server for a tool ServiceAccount's token: the way to its Vault role.
func (e *Env) tokenRequestCases(pod *corev1.Pod) []Case {
	ns := e.Namespace()
	vault := e.Policy.Spec.Sandbox.CredentialAgent.VaultAudience
	applySA := e.toolSA("terraform_apply")
	tokenAs := func(c kubernetes.Interface, sa string, spec authenticationv1.TokenRequestSpec) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			_, err := c.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{Spec: spec}, metav1.CreateOptions{})
			return err
		}
	}
	bound := authenticationv1.TokenRequestSpec{Audiences: []string{vault}, BoundObjectRef: &authenticationv1.BoundObjectReference{
		Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}}
	c := func(n string, f func(ctx context.Context) error) Case {
		return Case{Class: "token-request", Name: n, Rule: "token-request", Submit: f}
	}
	return []Case{
		// Issue 9's fourth finding, with the built-in edit role.
		c("edit user: `kubectl create token tool-terraform-apply --audience vault`", tokenAs(e.Edit, applySA, authenticationv1.TokenRequestSpec{Audiences: []string{vault}})),
		c("edit user: token for tool-terraform-apply with the API audience", tokenAs(e.Edit, applySA, authenticationv1.TokenRequestSpec{})),
		c("edit user: Vault token bound to a running sandbox Pod of its tool", tokenAs(e.Edit, pod.Spec.ServiceAccountName, bound)),
		c("cluster-wide admin: Vault token for tool-terraform-apply", tokenAs(e.Attacker, applySA, authenticationv1.TokenRequestSpec{Audiences: []string{vault}})),
		c("edit user: Vault-audience token for the MCP server's ServiceAccount", tokenAs(e.Edit, "agent-sandbox-mcp", authenticationv1.TokenRequestSpec{Audiences: []string{vault}})),
		c("edit user: legacy token Secret for tool-terraform-apply", func(ctx context.Context) error {
			s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "apply-token-" + e.Run, Annotations: map[string]string{corev1.ServiceAccountNameKey: applySA}},
				Type: corev1.SecretTypeServiceAccountToken}
			_, err := e.Edit.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{})
			return err
		}),
	}
}

func (e *Env) toolSA(tool string) string {
	t, err := e.Policy.Tool(tool)
	if err != nil {
		panic(err)
	}
	return t.ServiceAccount
}

// namespaceCases switch the webhook or Pod Security off for the sandbox namespace. They are server-side
// dry runs: if one were admitted, nothing would change.
func (e *Env) namespaceCases() []Case {
	ns := e.Namespace()
	patch := func(body string) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			_, err := e.Attacker.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, []byte(body), metav1.PatchOptions{DryRun: dryRun})
			return err
		}
	}
	c := func(n string, f func(ctx context.Context) error) Case {
		return Case{Class: "namespace", Name: n, Rule: "sandbox-namespace", Submit: f}
	}
	return []Case{
		c("remove the sandbox namespace's agent-sandbox.dev/sandbox label", patch(`{"metadata":{"labels":{"`+contract.LabelSandboxNamespace+`":null}}}`)),
		c("set the sandbox label to false", patch(`{"metadata":{"labels":{"`+contract.LabelSandboxNamespace+`":"false"}}}`)),
		c("remove the Pod Security enforce label", patch(`{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":null}}}`)),
		c("lower Pod Security enforce to privileged", patch(`{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"privileged"}}}`)),
		c("pin Pod Security enforce-version to v1.0", patch(`{"metadata":{"labels":{"pod-security.kubernetes.io/enforce-version":"v1.0"}}}`)),
		c("add a namespace node-selector annotation", patch(`{"metadata":{"annotations":{"scheduler.alpha.kubernetes.io/node-selector":"kubernetes.io/hostname=control-plane"}}}`)),
		c("delete the sandbox namespace", func(ctx context.Context) error {
			return e.Attacker.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{DryRun: dryRun})
		}),
	}
}

// protectedCases change the sandbox namespace's NetworkPolicies, quota, limits and ServiceAccounts (server-side dry
// runs).
func (e *Env) protectedCases() []Case {
	ns := e.Namespace()
	allowAll := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "allow-all-egress-" + e.Run},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}, Egress: []networkingv1.NetworkPolicyEgressRule{{}}}}
	c := func(n string, f func(ctx context.Context) error) Case {
		return Case{Class: "protected", Name: n, Rule: "sandbox-namespace", Submit: f}
	}
	return []Case{
		c("edit user: an allow-all egress NetworkPolicy", func(ctx context.Context) error {
			_, err := e.Edit.NetworkingV1().NetworkPolicies(ns).Create(ctx, allowAll, metav1.CreateOptions{DryRun: dryRun})
			return err
		}),
		c("edit user: delete the default-deny NetworkPolicy", func(ctx context.Context) error {
			return e.Edit.NetworkingV1().NetworkPolicies(ns).Delete(ctx, DefaultDenyPolicy, metav1.DeleteOptions{DryRun: dryRun})
		}),
		c("edit user: open the default-deny NetworkPolicy", func(ctx context.Context) error {
			_, err := e.Edit.NetworkingV1().NetworkPolicies(ns).Patch(ctx, DefaultDenyPolicy, types.MergePatchType,
				[]byte(`{"spec":{"egress":[{}]}}`), metav1.PatchOptions{DryRun: dryRun})
			return err
		}),
		c("admin elsewhere: a ResourceQuota in the sandbox namespace", func(ctx context.Context) error {
			q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "q-" + e.Run}, Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}}}
			_, err := e.Attacker.CoreV1().ResourceQuotas(ns).Create(ctx, q, metav1.CreateOptions{DryRun: dryRun})
			return err
		}),
		// The ServiceAccount admission plugin copies a ServiceAccount's imagePullSecrets into every Pod made
		// without its own: the Job controller's Pod of an approved call would then differ from the rendering
		// and be refused after its approval was spent. The MCP server's ServiceAccount stands in for the
		// tools' (the chart makes both; a harness without the chart has only the MCP server's).
		c("edit user: imagePullSecrets on a ServiceAccount of the sandbox namespace", func(ctx context.Context) error {
			_, err := e.Edit.CoreV1().ServiceAccounts(ns).Patch(ctx, e.MCPServiceAccount, types.MergePatchType,
				[]byte(`{"imagePullSecrets":[{"name":"regcred-`+e.Run+`"}]}`), metav1.PatchOptions{DryRun: dryRun})
			return err
		}),
		c("edit user: delete a ServiceAccount of the sandbox namespace", func(ctx context.Context) error {
			return e.Edit.CoreV1().ServiceAccounts(ns).Delete(ctx, e.MCPServiceAccount, metav1.DeleteOptions{DryRun: dryRun})
		}),
		c("edit user: a ServiceAccount in the sandbox namespace", func(ctx context.Context) error {
			sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "sa-" + e.Run}}
			_, err := e.Edit.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{DryRun: dryRun})
			return err
		}),
		c("admin elsewhere: a LimitRange in the sandbox namespace", func(ctx context.Context) error {
			l := &corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Name: "l-" + e.Run}, Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{
				Type: corev1.LimitTypeContainer, Max: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64")}}}}}
			_, err := e.Attacker.CoreV1().LimitRanges(ns).Create(ctx, l, metav1.CreateOptions{DryRun: dryRun})
			return err
		}),
	}
}

// DefaultDenyPolicy is the chart's default-deny NetworkPolicy of the sandbox namespace.
const DefaultDenyPolicy = "agent-sandbox-default-deny"

// configMapCases attack the ConfigMaps sandboxes read: workspaces, saved plans and CA bundles.
func (e *Env) configMapCases() []Case {
	ns := e.Namespace()
	files := map[string]string{"main.tf": "# " + e.Run + "\n"}
	good := func() *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: sandbox.WorkspaceConfigMapName(files), Labels: map[string]string{sandbox.LabelWorkspace: "true"}},
			Data: files, Immutable: ptr.To(true)}
	}
	create := func(mut func(*corev1.ConfigMap)) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			cm := good()
			mut(cm)
			_, err := e.MCP.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
			return err
		}
	}
	c := func(n, rule string, f func(ctx context.Context) error) Case {
		return Case{Class: "configmap", Name: n, Rule: rule, Submit: f}
	}
	return []Case{
		c("MCP server: a ConfigMap that is not a workspace or plan", "content-addressed", create(func(cm *corev1.ConfigMap) { cm.Name = "innocent-" + e.Run })),
		c("MCP server: a workspace named for other content", "content-addressed", create(func(cm *corev1.ConfigMap) { cm.Data["evil.tf"] = "# swapped\n" })),
		c("MCP server: a mutable workspace", "content-addressed", create(func(cm *corev1.ConfigMap) { cm.Immutable = nil })),
		c("MCP server: a saved plan named for other content", "content-addressed", create(func(cm *corev1.ConfigMap) {
			cm.Name, cm.Data, cm.BinaryData = contract.PlanConfigMapPrefix+strings.Repeat("ab", 32), nil, map[string][]byte{sandbox.PlanKey: []byte("PK\x03\x04 not that plan")}
		})),
		c("relabel an existing workspace", "content-addressed", func(ctx context.Context) error {
			if _, err := e.MCP.CoreV1().ConfigMaps(ns).Create(ctx, good(), metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("setup: a good workspace was refused: %w", err)
			}
			_, err := e.Attacker.CoreV1().ConfigMaps(ns).Patch(ctx, good().Name, types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
			return err
		}),
		c("edit user: replace the API server CA the credential agent trusts", "sandbox-namespace", func(ctx context.Context) error {
			name := e.Policy.Spec.Sandbox.CredentialAgent.APIServerCACertConfigMap
			_, err := e.Edit.CoreV1().ConfigMaps(ns).Patch(ctx, name, types.MergePatchType,
				[]byte(`{"data":{"ca.crt":"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"}}`), metav1.PatchOptions{DryRun: dryRun})
			return err
		}),
	}
}
