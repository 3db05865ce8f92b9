package webhook

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
)

// DefaultTimeoutSeconds bounds one admission call; the API server then fails the request (closed).
const DefaultTimeoutSeconds = int32(10)

// ConfigurationsFor describes the webhook registrations. The Helm chart renders the same registrations
// from YAML; a chart test compares the two, so this is the reference for what the webhook must see.
type ConfigurationsFor struct {
	Name             string // name of both configurations
	ServiceNamespace string
	ServiceName      string
	Port             int32
	TimeoutSeconds   int32
	// SandboxNamespace is the namespace the policy runs sandboxes in; the webhook guards its own labels.
	SandboxNamespace string
}

// SandboxNamespaceSelector selects the namespaces the webhook guards.
func SandboxNamespaceSelector() *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{contract.LabelSandboxNamespace: "true"}}
}

// Configurations returns the mutating and validating webhook configurations: every webhook fails closed,
// has side effects only outside dry runs (the ledgers), and matches equivalent API versions.
//
// What each validating webhook guards, and why (docs/architecture.md, invariants 1-4):
//   - jobs: CREATE and UPDATE — exactness, approvals, immutability;
//   - pods: CREATE and UPDATE — one Pod per Job, from the Job controller, exactly the rendering;
//   - jobs: DELETE — never orphaning the Pod;
//   - every subresource of every kind in the sandbox namespace, by allowlist (subresources.go): exec, attach,
//     portforward, proxy, ephemeralcontainers and resize refused; binding the scheduler's; status the node's
//     and the controllers', never changing metadata; eviction of idle warm Pods only; serviceaccounts/token
//     a tool ServiceAccount's only for the kubelet, bound to its sandbox Pod, the MCP server's only for the
//     chart's identity; anything else refused;
//   - bindings: CREATE — the legacy form of pods/binding, without a subresource, decided as pods/binding;
//   - other workload kinds: refused;
//   - the sandbox namespace object (matched by name, so removing its label does not unmatch it): its
//     selector and Pod Security labels, and its status and finalize subresources;
//   - NetworkPolicies, ResourceQuotas, LimitRanges, service-account token Secrets and ConfigMaps of the
//     sandbox namespace.
func Configurations(c ConfigurationsFor) (*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration) {
	timeout := c.TimeoutSeconds
	if timeout == 0 {
		timeout = DefaultTimeoutSeconds
	}
	return mutatingConfiguration(c, timeout), validatingConfiguration(c, timeout)
}

// webhookOps is a list of the operations a webhook rule matches.
type webhookOps = []admissionregistrationv1.OperationType

// clientConfig points a webhook at path on the webhook's Service.
func (c ConfigurationsFor) clientConfig(path string) admissionregistrationv1.WebhookClientConfig {
	return admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
		Namespace: c.ServiceNamespace, Name: c.ServiceName, Path: ptr.To(path), Port: ptr.To(c.Port)}}
}

// v1Rule matches operations o on version v1 of resources in groups, within scope.
func v1Rule(groups []string, resources []string, scope admissionregistrationv1.ScopeType, o webhookOps) admissionregistrationv1.RuleWithOperations {
	return admissionregistrationv1.RuleWithOperations{Operations: o, Rule: admissionregistrationv1.Rule{
		APIGroups: groups, APIVersions: []string{"v1"}, Resources: resources, Scope: ptr.To(scope)}}
}

// mutatingConfiguration is the mutating configuration: Jobs' webhook, on CREATE only, and the one that
// signs warm claims (claimsign.go).
func mutatingConfiguration(c ConfigurationsFor, timeout int32) *admissionregistrationv1.MutatingWebhookConfiguration {
	ns := admissionregistrationv1.NamespacedScope
	fail := ptr.To(admissionregistrationv1.Fail)
	equivalent := ptr.To(admissionregistrationv1.Equivalent)
	none := ptr.To(admissionregistrationv1.SideEffectClassNone)
	v1 := []string{"v1"}
	batch := []string{"batch"}
	create := admissionregistrationv1.Create

	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: c.Name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    contract.WebhookMutateJobs,
			ClientConfig:            c.clientConfig(PathMutateJobs),
			Rules:                   []admissionregistrationv1.RuleWithOperations{v1Rule(batch, []string{"jobs"}, ns, webhookOps{create})},
			FailurePolicy:           fail,
			MatchPolicy:             equivalent,
			SideEffects:             none,
			TimeoutSeconds:          ptr.To(timeout),
			NamespaceSelector:       SandboxNamespaceSelector(),
			AdmissionReviewVersions: v1,
			ReinvocationPolicy:      ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy),
		}},
	}
	// Signs warm claims (claimsign.go).
	mutating.Webhooks = append(mutating.Webhooks, claimSigningWebhook(c.clientConfig(PathMutatePods), timeout))
	return mutating
}

// validatingConfiguration is the validating configuration: the webhooks of the sandbox namespace's
// objects, each failing closed within timeout, then the one of the sandbox namespace object itself.
func validatingConfiguration(c ConfigurationsFor, timeout int32) *admissionregistrationv1.ValidatingWebhookConfiguration {
	fail := ptr.To(admissionregistrationv1.Fail)
	equivalent := ptr.To(admissionregistrationv1.Equivalent)
	v1 := []string{"v1"}
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: c.Name},
		Webhooks:   sandboxObjectWebhooks(c),
	}
	for i := range validating.Webhooks {
		w := &validating.Webhooks[i]
		w.FailurePolicy, w.MatchPolicy, w.TimeoutSeconds = fail, equivalent, ptr.To(timeout)
		w.NamespaceSelector, w.AdmissionReviewVersions = SandboxNamespaceSelector(), v1
	}
	// The sandbox namespace object itself. A namespaceSelector would be evaluated against the new labels,
	// so an UPDATE that removes the label would not be sent to the webhook at all; it is matched by name.
	validating.Webhooks = append(validating.Webhooks, sandboxNamespaceWebhook(c, timeout, fail, equivalent))
	return validating
}

// sandboxObjectWebhooks are the validating webhooks of the objects in the sandbox namespace, selected by
// its label; validatingConfiguration sets what they share (failure and match policy, timeout, selector).
func sandboxObjectWebhooks(c ConfigurationsFor) []admissionregistrationv1.ValidatingWebhook {
	ns := admissionregistrationv1.NamespacedScope
	none := ptr.To(admissionregistrationv1.SideEffectClassNone)
	create, update, del := admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete
	core, batch, apps := []string{""}, []string{"batch"}, []string{"apps"}
	return []admissionregistrationv1.ValidatingWebhook{
		{
			Name:         "jobs.validate.agent-sandbox.dev",
			ClientConfig: c.clientConfig(PathValidateJobs),
			// DELETE: a Job is never deleted so that its Pod is orphaned.
			Rules: []admissionregistrationv1.RuleWithOperations{v1Rule(batch, []string{"jobs"}, ns, webhookOps{create, update, del})},
			// The approval ledger is written on real (not dry-run) requests only.
			SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNoneOnDryRun),
		},
		{
			Name:         "pods.validate.agent-sandbox.dev",
			ClientConfig: c.clientConfig(PathValidatePods),
			Rules:        []admissionregistrationv1.RuleWithOperations{v1Rule(core, []string{"pods"}, ns, webhookOps{create, update})},
			// The Pod ledger is written on real requests only.
			SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNoneOnDryRun),
		},
		{
			// Every subresource of every object in the sandbox namespace, of any group and version, with
			// every operation: the allowlist in subresources.go decides, so a subresource a future
			// Kubernetes adds is refused until it is listed.
			Name:         "subresources.validate.agent-sandbox.dev",
			ClientConfig: c.clientConfig(PathSubresources),
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: webhookOps{admissionregistrationv1.OperationAll},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*/*"}, Scope: ptr.To(ns)}}},
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "subresources-only", Expression: "has(request.subResource) && request.subResource != ''"}},
			SideEffects:     none,
		},
		{
			// The legacy core v1 bindings resource (POST /api/v1/namespaces/NS/bindings) binds a Pod with the
			// same code as pods/binding, but has no subresource, so the webhook above never sees it: the
			// subresource check decides it as it decides pods/binding.
			Name:         "bindings.validate.agent-sandbox.dev",
			ClientConfig: c.clientConfig(PathSubresources),
			Rules:        []admissionregistrationv1.RuleWithOperations{v1Rule(core, []string{"bindings"}, ns, webhookOps{create})},
			SideEffects:  none,
		},
		{
			Name:         "workloads.validate.agent-sandbox.dev",
			ClientConfig: c.clientConfig(PathDenyWorkloads),
			Rules: []admissionregistrationv1.RuleWithOperations{
				v1Rule(apps, []string{"deployments", "replicasets", "statefulsets", "daemonsets"}, ns, webhookOps{create, update}),
				v1Rule(batch, []string{"cronjobs"}, ns, webhookOps{create, update}),
				v1Rule(core, []string{"replicationcontrollers"}, ns, webhookOps{create, update}),
			},
			SideEffects: none,
		},
		{
			Name:         "protected.validate.agent-sandbox.dev",
			ClientConfig: c.clientConfig(PathProtectedResources),
			Rules: []admissionregistrationv1.RuleWithOperations{
				v1Rule([]string{"networking.k8s.io"}, []string{"networkpolicies"}, ns, webhookOps{create, update, del}),
				v1Rule(core, []string{"resourcequotas", "limitranges", "serviceaccounts"}, ns, webhookOps{create, update, del}),
			},
			SideEffects: none,
		},
		{
			Name:         "secrets.validate.agent-sandbox.dev",
			ClientConfig: c.clientConfig(PathSecrets),
			Rules:        []admissionregistrationv1.RuleWithOperations{v1Rule(core, []string{"secrets"}, ns, webhookOps{create, update})},
			SideEffects:  none,
		},
		{
			Name:         "configmaps.validate.agent-sandbox.dev",
			ClientConfig: c.clientConfig(PathConfigMaps),
			Rules:        []admissionregistrationv1.RuleWithOperations{v1Rule(core, []string{"configmaps"}, ns, webhookOps{create, update, del})},
			SideEffects:  none,
		},
	}
}

// sandboxNamespaceWebhook is the validating webhook of the sandbox namespace object, matched by name:
// its selector and Pod Security labels, and its subresources.
func sandboxNamespaceWebhook(c ConfigurationsFor, timeout int32, fail *admissionregistrationv1.FailurePolicyType, equivalent *admissionregistrationv1.MatchPolicyType) admissionregistrationv1.ValidatingWebhook {
	core, v1 := []string{""}, []string{"v1"}
	update, del := admissionregistrationv1.Update, admissionregistrationv1.Delete
	none := ptr.To(admissionregistrationv1.SideEffectClassNone)
	return admissionregistrationv1.ValidatingWebhook{
		Name:         "sandbox-namespace.validate.agent-sandbox.dev",
		ClientConfig: c.clientConfig(PathSandboxNamespace),
		Rules: []admissionregistrationv1.RuleWithOperations{
			v1Rule(core, []string{"namespaces"}, admissionregistrationv1.ClusterScope, webhookOps{update, del}),
			// status and finalize, and whatever subresource comes next: metadata never changes through them.
			{Operations: webhookOps{admissionregistrationv1.OperationAll}, Rule: admissionregistrationv1.Rule{
				APIGroups: core, APIVersions: v1, Resources: []string{"namespaces/*"}, Scope: ptr.To(admissionregistrationv1.ClusterScope)}},
		},
		MatchConditions: []admissionregistrationv1.MatchCondition{{
			Name: "sandbox-namespace", Expression: "request.name == '" + c.SandboxNamespace + "'",
		}},
		SideEffects:             none,
		FailurePolicy:           fail,
		MatchPolicy:             equivalent,
		TimeoutSeconds:          ptr.To(timeout),
		AdmissionReviewVersions: v1,
	}
}
