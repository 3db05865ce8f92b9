package installcheck

import (
	"errors"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/agent-sandbox/agent-sandbox/webhook"
)

// TestCheckConfigurations: configurations as agent-sandbox renders them pass, with a caBundle injected, a
// longer timeout or an extra rule (guarding more is no drift); each way of guarding less is named.
func TestCheckConfigurations(t *testing.T) {
	render := func() (*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration) {
		return webhook.Configurations(webhook.ConfigurationsFor{Name: "agent-sandbox", ServiceNamespace: "agent-sandbox-system",
			ServiceName: "agent-sandbox-webhook", Port: 443, SandboxNamespace: "agent-sandbox"})
	}
	wantM, wantV := render()
	if len(wantV.Webhooks) < 5 || len(wantM.Webhooks) == 0 {
		t.Fatalf("the rendering has %d mutating and %d validating webhooks", len(wantM.Webhooks), len(wantV.Webhooks))
	}
	pods := admissionregistrationv1.RuleWithOperations{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}
	for _, tc := range []struct {
		name string
		mut  func(m *admissionregistrationv1.MutatingWebhookConfiguration, v *admissionregistrationv1.ValidatingWebhookConfiguration)
		want string // "" passes
	}{
		{"as rendered", func(*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration) {
		}, ""},
		{"a caBundle, a longer timeout and one more rule", func(m *admissionregistrationv1.MutatingWebhookConfiguration, v *admissionregistrationv1.ValidatingWebhookConfiguration) {
			m.Webhooks[0].ClientConfig.CABundle = []byte("pem")
			v.Webhooks[0].TimeoutSeconds = ptr.To[int32](30)
			v.Webhooks[0].Rules = append(v.Webhooks[0].Rules, pods)
		}, ""},
		{"a webhook removed", func(_ *admissionregistrationv1.MutatingWebhookConfiguration, v *admissionregistrationv1.ValidatingWebhookConfiguration) {
			v.Webhooks = v.Webhooks[1:]
		}, "is not registered"},
		{"failing open", func(_ *admissionregistrationv1.MutatingWebhookConfiguration, v *admissionregistrationv1.ValidatingWebhookConfiguration) {
			v.Webhooks[1].FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
		}, "does not fail closed (failurePolicy Ignore)"},
		{"a rule narrowed", func(m *admissionregistrationv1.MutatingWebhookConfiguration, _ *admissionregistrationv1.ValidatingWebhookConfiguration) {
			m.Webhooks[0].Rules[0].Operations = []admissionregistrationv1.OperationType{admissionregistrationv1.Delete}
		}, "no longer matches"},
		{"another namespace selector", func(_ *admissionregistrationv1.MutatingWebhookConfiguration, v *admissionregistrationv1.ValidatingWebhookConfiguration) {
			v.Webhooks[0].NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"nobody": "true"}}
		}, "selects namespaces"},
		{"a match condition added", func(_ *admissionregistrationv1.MutatingWebhookConfiguration, v *admissionregistrationv1.ValidatingWebhookConfiguration) {
			v.Webhooks[0].MatchConditions = append(v.Webhooks[0].MatchConditions, admissionregistrationv1.MatchCondition{Name: "never", Expression: "false"})
		}, "has match conditions"},
		{"another Service", func(m *admissionregistrationv1.MutatingWebhookConfiguration, _ *admissionregistrationv1.ValidatingWebhookConfiguration) {
			m.Webhooks[0].ClientConfig.Service.Name = "attacker"
		}, "calls Service agent-sandbox-system/attacker"},
		{"matchPolicy Exact", func(_ *admissionregistrationv1.MutatingWebhookConfiguration, v *admissionregistrationv1.ValidatingWebhookConfiguration) {
			v.Webhooks[0].MatchPolicy = ptr.To(admissionregistrationv1.Exact)
		}, "has matchPolicy Exact"},
		{"reinvocationPolicy flipped", func(m *admissionregistrationv1.MutatingWebhookConfiguration, _ *admissionregistrationv1.ValidatingWebhookConfiguration) {
			for i := range m.Webhooks {
				if deref(m.Webhooks[i].ReinvocationPolicy) == admissionregistrationv1.NeverReinvocationPolicy {
					m.Webhooks[i].ReinvocationPolicy = ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy)
				} else {
					m.Webhooks[i].ReinvocationPolicy = ptr.To(admissionregistrationv1.NeverReinvocationPolicy)
				}
			}
		}, "has reinvocationPolicy"},
		{"a webhook added", func(_ *admissionregistrationv1.MutatingWebhookConfiguration, v *admissionregistrationv1.ValidatingWebhookConfiguration) {
			extra := v.Webhooks[0]
			extra.Name = "everything.attacker.example"
			v.Webhooks = append(v.Webhooks, extra)
		}, "webhook everything.attacker.example (calling Service agent-sandbox-system/agent-sandbox-webhook"},
		{"a URL", func(m *admissionregistrationv1.MutatingWebhookConfiguration, _ *admissionregistrationv1.ValidatingWebhookConfiguration) {
			m.Webhooks[0].ClientConfig.Service, m.Webhooks[0].ClientConfig.URL = nil, ptr.To("https://attacker.example/")
		}, "calls URL https://attacker.example/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, v := render()
			tc.mut(m, v)
			err := CheckConfigurations(m, v, wantM, wantV)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("want no drift, got %v", err)
			case tc.want != "" && (!errors.Is(err, ErrDrifted) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want ErrDrifted saying %q", err, tc.want)
			}
		})
	}
}

// TestCheckGuard: the admission policy that keeps the webhook's ServiceAccount to caBundle must fail closed,
// validate something, and be bound with Deny.
func TestCheckGuard(t *testing.T) {
	good := func() (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
		p := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "guard"},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{FailurePolicy: ptr.To(admissionregistrationv1.Fail),
				Validations: []admissionregistrationv1.Validation{{Expression: "false"}}}}
		b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "guard"},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "guard", ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}}}
		return p, b
	}
	for _, tc := range []struct {
		name string
		mut  func(*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding)
		want string
	}{
		{"as the chart makes it", func(*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
		}, ""},
		{"failing open", func(p *admissionregistrationv1.ValidatingAdmissionPolicy, _ *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
			p.Spec.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
		}, "does not fail closed"},
		{"no validations", func(p *admissionregistrationv1.ValidatingAdmissionPolicy, _ *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
			p.Spec.Validations = nil
		}, "validates nothing"},
		{"bound to another policy", func(_ *admissionregistrationv1.ValidatingAdmissionPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
			b.Spec.PolicyName = "other"
		}, `binds "other"`},
		{"warn only", func(_ *admissionregistrationv1.ValidatingAdmissionPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
			b.Spec.ValidationActions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Warn, admissionregistrationv1.Audit}
		}, "does not deny"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, b := good()
			tc.mut(p, b)
			err := CheckGuard(p, b)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("want it in force, got %v", err)
			case tc.want != "" && (!errors.Is(err, ErrDrifted) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want ErrDrifted saying %q", err, tc.want)
			}
		})
	}
}
