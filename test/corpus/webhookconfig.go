package corpus

import (
	"context"
	"fmt"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// GuardRefusal starts every message of the chart's admission policy that keeps the webhook's ServiceAccount
// to caBundle (charts/agent-sandbox/templates/webhookconfigurations-guard.yaml).
const GuardRefusal = "the webhook's ServiceAccount may"

// ConfigAttempt is one change the webhook's ServiceAccount made, as a dry run, to its own webhook
// configurations.
type ConfigAttempt struct {
	Name string
	// Refused is true when the chart's admission policy refused it; Err is the API server's answer.
	Refused bool
	Err     error
}

// WebhookIdentityAttempts changes, acting as the webhook's ServiceAccount (as), the two webhook
// configurations named name: in the default self-managed TLS the ServiceAccount may update them to inject
// its CA, RBAC cannot narrow an update to one field, and the built-in edit and admin roles of the release
// namespace may impersonate it. Each change would turn the webhook against the cluster or off: every Pod of
// the cluster sent to a mutating webhook, a webhook matching every namespace, another webhook,
// failurePolicy Ignore, a finalizer, the reinvocation policy flipped. All must be refused; the last attempt,
// a new caBundle alone, must pass. Every attempt is a dry run. The API server loads a new admission policy
// within seconds, so the first refusal is waited for (up to settle).
func WebhookIdentityAttempts(ctx context.Context, as kubernetes.Interface, name string, settle time.Duration) (attacks []ConfigAttempt, caBundle error) {
	dry := metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}
	validating := func(mut func(*admissionregistrationv1.ValidatingWebhookConfiguration)) error {
		v, err := as.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		mut(v)
		_, err = as.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, v, dry)
		return err
	}
	mutating := func(mut func(*admissionregistrationv1.MutatingWebhookConfiguration)) error {
		m, err := as.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		mut(m)
		_, err = as.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, m, dry)
		return err
	}
	refused := func(err error) bool { return err != nil && strings.Contains(err.Error(), GuardRefusal) }

	everyNamespace := func(v *admissionregistrationv1.ValidatingWebhookConfiguration) {
		v.Webhooks[0].NamespaceSelector = &metav1.LabelSelector{}
	}
	err := validating(everyNamespace)
	for deadline := time.Now().Add(settle); !refused(err) && time.Now().Before(deadline); {
		time.Sleep(500 * time.Millisecond)
		err = validating(everyNamespace)
	}
	attacks = append(attacks, ConfigAttempt{Name: "a validating webhook matching every namespace", Refused: refused(err), Err: err})
	for _, a := range []struct {
		name string
		try  func() error
	}{
		{"every Pod of the cluster sent to the mutating webhook", func() error {
			return mutating(func(m *admissionregistrationv1.MutatingWebhookConfiguration) {
				m.Webhooks[0].NamespaceSelector = &metav1.LabelSelector{}
				m.Webhooks[0].Rules = append(m.Webhooks[0].Rules, admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}})
			})
		}},
		{"another webhook", func() error {
			return validating(func(v *admissionregistrationv1.ValidatingWebhookConfiguration) {
				w := v.Webhooks[0]
				w.Name = "everything.attacker.example"
				v.Webhooks = append(v.Webhooks, w)
			})
		}},
		{"failurePolicy Ignore", func() error {
			return validating(func(v *admissionregistrationv1.ValidatingWebhookConfiguration) {
				v.Webhooks[0].FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
			})
		}},
		{"a finalizer", func() error {
			return validating(func(v *admissionregistrationv1.ValidatingWebhookConfiguration) {
				v.Finalizers = append(v.Finalizers, "attacker.example/hold")
			})
		}},
		// With IfNeeded, pods.mutate would sign a warm Pod's claim again after a later webhook changed it.
		{"the reinvocation policy flipped", func() error {
			return mutating(func(m *admissionregistrationv1.MutatingWebhookConfiguration) {
				for i := range m.Webhooks {
					if m.Webhooks[i].ReinvocationPolicy != nil && *m.Webhooks[i].ReinvocationPolicy == admissionregistrationv1.NeverReinvocationPolicy {
						m.Webhooks[i].ReinvocationPolicy = ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy)
					} else {
						m.Webhooks[i].ReinvocationPolicy = ptr.To(admissionregistrationv1.NeverReinvocationPolicy)
					}
				}
			})
		}},
	} {
		err := a.try()
		attacks = append(attacks, ConfigAttempt{Name: a.name, Refused: refused(err), Err: err})
	}
	caBundle = validating(func(v *admissionregistrationv1.ValidatingWebhookConfiguration) {
		for i := range v.Webhooks {
			v.Webhooks[i].ClientConfig.CABundle = append(v.Webhooks[i].ClientConfig.CABundle, '\n')
		}
	})
	return attacks, caBundle
}

// EditImpersonating binds the built-in edit role of namespace ns to Edit's ServiceAccount and returns a
// client that, with that ServiceAccount's own token, acts as the ServiceAccount sa of ns: what the edit role
// lets any user of ns do. Close removes the binding.
func (id *Identities) EditImpersonating(ctx context.Context, ns, sa string) (kubernetes.Interface, error) {
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "agent-sandbox-corpus-editor", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: CorpusNamespace, Name: "editor"}}}
	if _, err := id.Admin.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("bind the editor to edit in %s: %w", ns, err)
	}
	prev := id.cleanup
	id.cleanup = func(ctx context.Context) {
		_ = id.Admin.RbacV1().RoleBindings(ns).Delete(ctx, rb.Name, metav1.DeleteOptions{})
		prev(ctx)
	}
	cfg := rest.CopyConfig(id.editConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":" + sa}
	cfg.WarningHandler = rest.NoWarnings{}
	return kubernetes.NewForConfig(cfg)
}
