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
}

// SandboxNamespaceSelector selects the namespaces the webhook guards.
func SandboxNamespaceSelector() *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{contract.LabelSandboxNamespace: "true"}}
}

// Configurations returns the mutating and validating webhook configurations: every webhook fails closed,
// has side effects only outside dry runs (the approval ledger), and matches equivalent API versions.
func Configurations(c ConfigurationsFor) (*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration) {
	timeout := c.TimeoutSeconds
	if timeout == 0 {
		timeout = DefaultTimeoutSeconds
	}
	cc := func(path string) admissionregistrationv1.WebhookClientConfig {
		return admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
			Namespace: c.ServiceNamespace, Name: c.ServiceName, Path: ptr.To(path), Port: ptr.To(c.Port)}}
	}
	rule := func(groups []string, version string, resources []string, ops ...admissionregistrationv1.OperationType) admissionregistrationv1.RuleWithOperations {
		return admissionregistrationv1.RuleWithOperations{Operations: ops, Rule: admissionregistrationv1.Rule{
			APIGroups: groups, APIVersions: []string{version}, Resources: resources, Scope: ptr.To(admissionregistrationv1.NamespacedScope)}}
	}
	fail := ptr.To(admissionregistrationv1.Fail)
	equivalent := ptr.To(admissionregistrationv1.Equivalent)
	sideEffects := ptr.To(admissionregistrationv1.SideEffectClassNoneOnDryRun)
	none := ptr.To(admissionregistrationv1.SideEffectClassNone)
	v1 := []string{"v1"}
	create, update, connect := admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Connect

	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: c.Name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "jobs.mutate.agent-sandbox.dev",
			ClientConfig:            cc(PathMutateJobs),
			Rules:                   []admissionregistrationv1.RuleWithOperations{rule([]string{"batch"}, "v1", []string{"jobs"}, create)},
			FailurePolicy:           fail,
			MatchPolicy:             equivalent,
			SideEffects:             none,
			TimeoutSeconds:          ptr.To(timeout),
			NamespaceSelector:       SandboxNamespaceSelector(),
			AdmissionReviewVersions: v1,
			ReinvocationPolicy:      ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy),
		}},
	}
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: c.Name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{
			{
				Name:         "jobs.validate.agent-sandbox.dev",
				ClientConfig: cc(PathValidateJobs),
				Rules:        []admissionregistrationv1.RuleWithOperations{rule([]string{"batch"}, "v1", []string{"jobs"}, create, update)},
				// The approval ledger is written on real (not dry-run) requests only.
				SideEffects: sideEffects,
			},
			{
				Name:         "pods.validate.agent-sandbox.dev",
				ClientConfig: cc(PathValidatePods),
				Rules:        []admissionregistrationv1.RuleWithOperations{rule([]string{""}, "v1", []string{"pods"}, create, update)},
				SideEffects:  none,
			},
			{
				Name:         "pod-access.validate.agent-sandbox.dev",
				ClientConfig: cc(PathDenyPodAccess),
				Rules: []admissionregistrationv1.RuleWithOperations{
					rule([]string{""}, "v1", []string{"pods/exec", "pods/attach", "pods/portforward"}, connect),
					rule([]string{""}, "v1", []string{"pods/ephemeralcontainers"}, create, update),
				},
				SideEffects: none,
			},
			{
				Name:         "workloads.validate.agent-sandbox.dev",
				ClientConfig: cc(PathDenyWorkloads),
				Rules: []admissionregistrationv1.RuleWithOperations{
					rule([]string{"apps"}, "v1", []string{"deployments", "replicasets", "statefulsets", "daemonsets"}, create, update),
					rule([]string{"batch"}, "v1", []string{"cronjobs"}, create, update),
					rule([]string{""}, "v1", []string{"replicationcontrollers"}, create, update),
				},
				SideEffects: none,
			},
		},
	}
	for i := range validating.Webhooks {
		w := &validating.Webhooks[i]
		w.FailurePolicy, w.MatchPolicy, w.TimeoutSeconds = fail, equivalent, ptr.To(timeout)
		w.NamespaceSelector, w.AdmissionReviewVersions = SandboxNamespaceSelector(), v1
	}
	return mutating, validating
}
