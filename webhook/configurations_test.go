package webhook

import (
	"context"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	admissioncel "k8s.io/apiserver/pkg/admission/plugin/cel"
	apiwebhook "k8s.io/apiserver/pkg/admission/plugin/webhook"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/predicates/rules"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
)

// matchingPaths are the paths of the validating webhooks of Configurations that the API server calls for
// attr on an object of the sandbox namespace: as the API server decides it, with k8s.io/apiserver's rule
// matcher and its CEL match conditions (the namespace selector holds for the sandbox namespace).
func matchingPaths(t *testing.T, v *admissionregistrationv1.ValidatingWebhookConfiguration, attr admission.Attributes, kind schema.GroupVersionKind) []string {
	t.Helper()
	compiler := admissioncel.NewConditionCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	sandboxNS := labels.Set{contract.LabelSandboxNamespace: "true"}
	var paths []string
	for i := range v.Webhooks {
		w := &v.Webhooks[i]
		if w.NamespaceSelector != nil {
			sel, err := metav1.LabelSelectorAsSelector(w.NamespaceSelector)
			if err != nil {
				t.Fatal(err)
			}
			if !sel.Matches(sandboxNS) {
				continue
			}
		}
		matched := false
		for _, r := range w.Rules {
			if (&rules.Matcher{Rule: r, Attr: attr}).Matches() {
				matched = true
			}
		}
		if !matched {
			continue
		}
		m := apiwebhook.NewValidatingWebhookAccessor(w.Name, v.Name, w).GetCompiledMatcher(compiler)
		res := m.Match(context.Background(), &admission.VersionedAttributes{Attributes: attr, VersionedKind: kind, VersionedObject: admission.NewLazyObject(attr.GetObject())}, nil, nil)
		if res.Error != nil {
			t.Fatalf("webhook %s: match conditions: %v", w.Name, res.Error)
		}
		if res.Matches {
			paths = append(paths, *w.ClientConfig.Service.Path)
		}
	}
	return paths
}

// TestBindingsReachTheWebhook: a Pod is bound to a node through pods/binding, and through the legacy core v1
// resource bindings (POST /api/v1/namespaces/NS/bindings), which the API server serves with the same code
// but without a subresource, so the subresources webhook (matched only when request.subResource is set)
// never sees it. Both must reach the webhook's subresource check.
func TestBindingsReachTheWebhook(t *testing.T) {
	_, v := Configurations(ConfigurationsFor{Name: "agent-sandbox", ServiceNamespace: "agent-sandbox-system", ServiceName: "agent-sandbox-webhook",
		Port: 443, SandboxNamespace: "agent-sandbox"})
	binding := &corev1.Binding{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Binding"}, ObjectMeta: metav1.ObjectMeta{Name: "call-pod", Namespace: "agent-sandbox"},
		Target: corev1.ObjectReference{Kind: "Node", Name: "node-a"}}
	bindingKind := corev1.SchemeGroupVersion.WithKind("Binding")
	attacker := &user.DefaultInfo{Name: "attacker", Groups: []string{"system:authenticated"}}
	for _, tt := range []struct {
		name        string
		resource    string
		subresource string
		obj         runtime.Object
		kind        schema.GroupVersionKind
		want        string // a path the request must reach; "" = none of the subresource check
	}{
		{"pods/binding", "pods", "binding", binding, bindingKind, PathSubresources},
		{"bindings (legacy, no subresource)", "bindings", "", binding, bindingKind, PathSubresources},
		// Control: a plain object without a subresource does not go to the subresource check.
		{"configmaps", "configmaps", "", &corev1.ConfigMap{}, corev1.SchemeGroupVersion.WithKind("ConfigMap"), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			attr := admission.NewAttributesRecord(tt.obj, nil, tt.kind, "agent-sandbox", "call-pod", corev1.SchemeGroupVersion.WithResource(tt.resource), tt.subresource,
				admission.Create, &metav1.CreateOptions{}, false, attacker)
			paths := matchingPaths(t, v, attr, tt.kind)
			reaches := false
			for _, p := range paths {
				reaches = reaches || p == PathSubresources
			}
			if reaches != (tt.want != "") {
				t.Fatalf("a CREATE of %s reaches the webhooks at %q; want the subresource check (%s): %v", tt.name, paths, PathSubresources, tt.want != "")
			}
		})
	}
}
