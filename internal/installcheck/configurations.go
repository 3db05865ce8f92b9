package installcheck

import (
	"errors"
	"fmt"
	"reflect"
	"slices"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ErrDrifted: a webhook configuration registered in the cluster guards less than the chart's: a webhook
// removed, failing open, matching fewer requests or namespaces, or calling something else. A post-renderer,
// a GitOps tool or a hand edit can do that after the install; the unsafe Job may still be refused then.
var ErrDrifted = errors.New("the registered webhook configurations guard less than agent-sandbox's")

// hook is what CheckConfigurations compares of a mutating or validating webhook: what it is called for and
// what it calls. The caBundle, timeout and side-effect class are left out: the first is injected after the
// install, the others cannot make it guard less.
type hook struct {
	service           *admissionregistrationv1.ServiceReference
	url               *string
	rules             []admissionregistrationv1.RuleWithOperations
	failurePolicy     *admissionregistrationv1.FailurePolicyType
	namespaceSelector *metav1.LabelSelector
	objectSelector    *metav1.LabelSelector
	matchConditions   []admissionregistrationv1.MatchCondition
	matchPolicy       *admissionregistrationv1.MatchPolicyType
	// reinvocation is a mutating webhook's reinvocationPolicy: with IfNeeded, the Pod webhook would sign a
	// warm Pod's claim again after a later webhook changed the Pod.
	reinvocation *admissionregistrationv1.ReinvocationPolicyType
}

func mutatingHooks(c *admissionregistrationv1.MutatingWebhookConfiguration) map[string]hook {
	out := map[string]hook{}
	for _, w := range c.Webhooks {
		out[w.Name] = hook{w.ClientConfig.Service, w.ClientConfig.URL, w.Rules, w.FailurePolicy, w.NamespaceSelector, w.ObjectSelector, w.MatchConditions,
			w.MatchPolicy, w.ReinvocationPolicy}
	}
	return out
}

func validatingHooks(c *admissionregistrationv1.ValidatingWebhookConfiguration) map[string]hook {
	out := map[string]hook{}
	for _, w := range c.Webhooks {
		out[w.Name] = hook{w.ClientConfig.Service, w.ClientConfig.URL, w.Rules, w.FailurePolicy, w.NamespaceSelector, w.ObjectSelector, w.MatchConditions,
			w.MatchPolicy, nil}
	}
	return out
}

// CheckConfigurations compares the registered configurations with the ones agent-sandbox renders
// (webhook.Configurations, which the chart's templates are tested to equal). Every rendered webhook must be
// registered, fail closed, call the same Service path, match at least the rendered rules and exactly the
// rendered selectors, match conditions, match policy and reinvocation policy; and no other webhook may be in
// the two configurations. It returns every difference, joined, wrapped in ErrDrifted.
func CheckConfigurations(liveM *admissionregistrationv1.MutatingWebhookConfiguration, liveV *admissionregistrationv1.ValidatingWebhookConfiguration,
	wantM *admissionregistrationv1.MutatingWebhookConfiguration, wantV *admissionregistrationv1.ValidatingWebhookConfiguration) error {
	var errs []error
	errs = append(errs, compareHooks("MutatingWebhookConfiguration "+wantM.Name, mutatingHooks(liveM), mutatingHooks(wantM))...)
	errs = append(errs, compareHooks("ValidatingWebhookConfiguration "+wantV.Name, validatingHooks(liveV), validatingHooks(wantV))...)
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrDrifted, errors.Join(errs...))
}

func compareHooks(where string, live, want map[string]hook) []error {
	var errs []error
	for name, w := range want {
		l, ok := live[name]
		if !ok {
			errs = append(errs, fmt.Errorf("%s: webhook %s is not registered", where, name))
			continue
		}
		if l.failurePolicy == nil || *l.failurePolicy != admissionregistrationv1.Fail {
			errs = append(errs, fmt.Errorf("%s: webhook %s does not fail closed (failurePolicy %v)", where, name, deref(l.failurePolicy)))
		}
		if l.url != nil || !sameService(l.service, w.service) {
			errs = append(errs, fmt.Errorf("%s: webhook %s calls %s, not %s", where, name, target(l), target(w)))
		}
		for _, r := range w.rules {
			if !containsRule(l.rules, r) {
				errs = append(errs, fmt.Errorf("%s: webhook %s no longer matches %v %v/%v %v", where, name, r.Operations, r.APIGroups, r.APIVersions, r.Resources))
			}
		}
		if !sameSelector(l.namespaceSelector, w.namespaceSelector) || !sameSelector(l.objectSelector, w.objectSelector) {
			errs = append(errs, fmt.Errorf("%s: webhook %s selects namespaces %v and objects %v, not %v and %v", where, name,
				l.namespaceSelector, l.objectSelector, w.namespaceSelector, w.objectSelector))
		}
		if len(l.matchConditions)+len(w.matchConditions) > 0 && !reflect.DeepEqual(l.matchConditions, w.matchConditions) {
			errs = append(errs, fmt.Errorf("%s: webhook %s has match conditions %v, not %v", where, name, l.matchConditions, w.matchConditions))
		}
		if w.matchPolicy != nil && deref(l.matchPolicy) != *w.matchPolicy {
			errs = append(errs, fmt.Errorf("%s: webhook %s has matchPolicy %v, not %v", where, name, deref(l.matchPolicy), *w.matchPolicy))
		}
		if w.reinvocation != nil && deref(l.reinvocation) != *w.reinvocation {
			errs = append(errs, fmt.Errorf("%s: webhook %s has reinvocationPolicy %v, not %v", where, name, deref(l.reinvocation), *w.reinvocation))
		}
	}
	// A webhook agent-sandbox does not render, in its own configuration, was added by someone else.
	for name, l := range live {
		if _, ok := want[name]; !ok {
			errs = append(errs, fmt.Errorf("%s: webhook %s (calling %s) is not agent-sandbox's", where, name, target(l)))
		}
	}
	return errs
}

func containsRule(rules []admissionregistrationv1.RuleWithOperations, r admissionregistrationv1.RuleWithOperations) bool {
	for _, have := range rules {
		if reflect.DeepEqual(have, r) {
			return true
		}
	}
	return false
}

// sameService compares two Service references, a missing port being the default 443.
func sameService(a, b *admissionregistrationv1.ServiceReference) bool {
	if a == nil || b == nil {
		return a == b
	}
	port := func(s *admissionregistrationv1.ServiceReference) int32 {
		if s.Port == nil {
			return 443
		}
		return *s.Port
	}
	return a.Namespace == b.Namespace && a.Name == b.Name && deref(a.Path) == deref(b.Path) && port(a) == port(b)
}

// sameSelector compares two label selectors, none being the same as an empty one (the API's default).
func sameSelector(a, b *metav1.LabelSelector) bool {
	empty := func(s *metav1.LabelSelector) bool {
		return s == nil || (len(s.MatchLabels) == 0 && len(s.MatchExpressions) == 0)
	}
	if empty(a) || empty(b) {
		return empty(a) && empty(b)
	}
	return reflect.DeepEqual(a, b)
}

func target(h hook) string {
	if h.url != nil {
		return "URL " + *h.url
	}
	if h.service == nil {
		return "nothing"
	}
	return fmt.Sprintf("Service %s/%s%s", h.service.Namespace, h.service.Name, deref(h.service.Path))
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// CheckGuard checks the admission policy that keeps the webhook's ServiceAccount to injecting caBundle
// (self-managed TLS, the chart's webhookconfigurations-guard.yaml): the policy fails closed and its binding
// names it and denies.
func CheckGuard(p *admissionregistrationv1.ValidatingAdmissionPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) error {
	var errs []error
	if p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != admissionregistrationv1.Fail {
		errs = append(errs, fmt.Errorf("ValidatingAdmissionPolicy %s does not fail closed (failurePolicy %v)", p.Name, deref(p.Spec.FailurePolicy)))
	}
	if len(p.Spec.Validations) == 0 {
		errs = append(errs, fmt.Errorf("ValidatingAdmissionPolicy %s validates nothing", p.Name))
	}
	if b.Spec.PolicyName != p.Name {
		errs = append(errs, fmt.Errorf("ValidatingAdmissionPolicyBinding %s binds %q, not %s", b.Name, b.Spec.PolicyName, p.Name))
	}
	if !slices.Contains(b.Spec.ValidationActions, admissionregistrationv1.Deny) {
		errs = append(errs, fmt.Errorf("ValidatingAdmissionPolicyBinding %s does not deny (validationActions %v)", b.Name, b.Spec.ValidationActions))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrDrifted, errors.Join(errs...))
}
