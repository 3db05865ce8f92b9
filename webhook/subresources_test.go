package webhook

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
)

func TestCheckSubresource(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	j := asServer(t, f.job(t, "k8s_get_pod_status", podParams(), ""))
	pod := podOf(t, j)
	pod.Name, pod.Namespace, pod.Spec.NodeName = "call-pod", j.Namespace, "node-a"
	warm := pod.DeepCopy()
	warm.Name, warm.Labels = "warm-idle", map[string]string{contract.LabelWarm: "true", contract.LabelTool: "k8s_get_pod_status"}
	claimed := warm.DeepCopy()
	claimed.Name, claimed.Annotations = "warm-claimed", map[string]string{contract.AnnotationClaim: "{}"}
	f.c.Cluster = &fakeCluster{pods: []*corev1.Pod{pod, warm, claimed}}
	f.c.Identities.MCPUser = "system:serviceaccount:" + j.Namespace + ":agent-sandbox-mcp"

	node := func(n string) Request {
		return Request{Operation: "UPDATE", User: "system:node:" + n, Groups: []string{"system:nodes", "system:authenticated"}, Resource: "pods", SubResource: "status", Name: pod.Name, Namespace: pod.Namespace}
	}
	as := func(user, op, resource, sub string) Request {
		return Request{Operation: op, User: user, Groups: []string{"system:authenticated"}, Resource: resource, SubResource: sub, Name: pod.Name, Namespace: pod.Namespace}
	}
	admin := as("kubernetes-admin", "UPDATE", "pods", "status")
	admin.Groups = []string{"system:masters"}
	running := pod.DeepCopy()
	running.Status.Phase = corev1.PodRunning
	forged := running.DeepCopy()
	forged.Annotations = map[string]string{contract.AnnotationClaim: `{"argv":["/agent-sandbox","version"]}`}
	relabelled := running.DeepCopy()
	relabelled.Labels = map[string]string{"app": "web"}

	for _, tt := range []struct {
		name     string
		req      Request
		obj, old any
		rule     string // "" = allowed
	}{
		{"the Pod's own kubelet reports status", node("node-a"), running, pod, ""},
		{"another node's kubelet writes its status", node("node-b"), running, pod, "pod-status"},
		{"the kubelet forges a claim through status", node("node-a"), forged, pod, "pod-status"},
		{"the kubelet relabels through status", node("node-a"), relabelled, pod, "pod-status"},
		{"a cluster admin writes status", as("attacker", "UPDATE", "pods", "status"), running, pod, "pod-status"},
		{"the chart's identity forges a claim through status", admin, forged, pod, "pod-status"},
		{"the node controller marks it not ready", as("system:serviceaccount:kube-system:node-controller", "UPDATE", "pods", "status"), running, pod, ""},
		{"the scheduler binds", as("system:kube-scheduler", "CREATE", "pods", "binding"), bindingOf(pod), nil, ""},
		{"someone else binds", as("attacker", "CREATE", "pods", "binding"), bindingOf(pod), nil, "pod-binding"},
		{"exec", as("attacker", "CONNECT", "pods", "exec"), nil, nil, "no-pod-access"},
		{"ephemeral container", as("attacker", "UPDATE", "pods", "ephemeralcontainers"), nil, nil, "no-ephemeral-containers"},
		{"a subresource Kubernetes has not invented yet", as("attacker", "UPDATE", "pods", "checkpoint"), running, pod, "subresource-allowlist"},
		{"status with an operation it has not", as("system:node:node-a", "CREATE", "pods", "status"), running, pod, "subresource-allowlist"},
		{"evict an idle warm Pod", Request{Operation: "CREATE", User: "drain", Resource: "pods", SubResource: "eviction", Name: warm.Name, Namespace: warm.Namespace}, nil, nil, ""},
		{"evict a claimed warm Pod", Request{Operation: "CREATE", User: "drain", Resource: "pods", SubResource: "eviction", Name: claimed.Name, Namespace: claimed.Namespace}, nil, nil, "no-eviction"},
		{"evict a call's Pod", as("drain", "CREATE", "pods", "eviction"), nil, nil, "no-eviction"},
		{"the Job controller reports Job status", Request{Operation: "UPDATE", User: "system:serviceaccount:kube-system:job-controller", Resource: "jobs", SubResource: "status"}, withStatus(j), j, ""},
		{"the Job controller relabels a Job", Request{Operation: "UPDATE", User: "system:serviceaccount:kube-system:job-controller", Resource: "jobs", SubResource: "status"}, withLabel(j), j, "job-status"},
		{"an edit user writes Job status", Request{Operation: "UPDATE", User: "editor", Resource: "jobs", SubResource: "status"}, withStatus(j), j, "job-status"},
		{"an edit user mints an MCP token", Request{Operation: "CREATE", User: "editor", Resource: "serviceaccounts", SubResource: "token", Name: "agent-sandbox-mcp", Namespace: j.Namespace}, tokenRequest(3600), nil, "mcp-token"},
		{"the chart's identity mints a year-long MCP token", Request{Operation: "CREATE", User: "kubernetes-admin", Groups: []string{"system:masters"}, Resource: "serviceaccounts", SubResource: "token", Name: "agent-sandbox-mcp", Namespace: j.Namespace}, tokenRequest(365 * 86400), nil, "mcp-token"},
		{"the chart's identity mints a day's MCP token", Request{Operation: "CREATE", User: "kubernetes-admin", Groups: []string{"system:masters"}, Resource: "serviceaccounts", SubResource: "token", Name: "agent-sandbox-mcp", Namespace: j.Namespace}, tokenRequest(86400), nil, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var o, old object
			if tt.obj != nil {
				o = obj(t, tt.obj)
			}
			if tt.old != nil {
				old = obj(t, tt.old)
			}
			_, err := f.c.CheckSubresource(ctx, tt.req, o, old)
			if tt.rule == "" && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if tt.rule != "" && ruleOf(err) != tt.rule {
				t.Fatalf("want refusal by %s, got %v", tt.rule, err)
			}
		})
	}
}

func TestSandboxNamespaceSubresources(t *testing.T) {
	f := newFixture(t)
	ns := &corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: f.p.Spec.Sandbox.Namespace,
		Labels: map[string]string{contract.LabelSandboxNamespace: "true", "pod-security.kubernetes.io/enforce": "restricted"}}}
	stripped := ns.DeepCopy()
	stripped.Labels = nil
	finalized := ns.DeepCopy()
	finalized.Spec.Finalizers = nil
	for _, tt := range []struct {
		name, sub, user string
		groups          []string
		obj             *corev1.Namespace
		rule            string
	}{
		{"labels removed through finalize by the chart's identity", "finalize", "kubernetes-admin", []string{"system:masters"}, stripped, "sandbox-namespace"},
		{"labels removed through status by a cluster admin", "status", "attacker", nil, stripped, "sandbox-namespace"},
		{"labels removed through finalize by the namespace controller", "finalize", "system:serviceaccount:kube-system:namespace-controller", nil, stripped, "sandbox-namespace"},
		{"the namespace controller finalizes", "finalize", "system:serviceaccount:kube-system:namespace-controller", nil, finalized, ""},
		{"a cluster admin finalizes", "finalize", "attacker", nil, finalized, "sandbox-namespace"},
		{"an unknown namespace subresource", "future", "kubernetes-admin", []string{"system:masters"}, ns, "subresource-allowlist"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := Request{Operation: "UPDATE", User: tt.user, Groups: tt.groups, Name: ns.Name, Resource: "namespaces", SubResource: tt.sub}
			_, err := f.c.CheckNamespace(context.Background(), req, obj(t, tt.obj), obj(t, ns))
			if tt.rule == "" && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if tt.rule != "" && ruleOf(err) != tt.rule {
				t.Fatalf("want refusal by %s, got %v", tt.rule, err)
			}
		})
	}
}

func TestCheckJobDelete(t *testing.T) {
	f := newFixture(t)
	for _, tt := range []struct {
		name string
		opts map[string]any
		ok   bool
	}{
		{"no options (batch/v1 orphans by default)", nil, false},
		{"propagationPolicy Orphan", map[string]any{"propagationPolicy": "Orphan"}, false},
		{"orphanDependents true", map[string]any{"orphanDependents": true}, false},
		{"orphanDependents false", map[string]any{"orphanDependents": false}, true},
		{"Background", map[string]any{"propagationPolicy": "Background"}, true},
		{"Foreground", map[string]any{"propagationPolicy": "Foreground"}, true},
	} {
		_, err := f.c.CheckJobDelete(context.Background(), Request{Operation: "DELETE", User: "agent-sandbox-mcp", Name: "j", Options: tt.opts})
		if tt.ok != (err == nil) || (!tt.ok && ruleOf(err) != "no-orphans") {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
}

func TestCheckConfigMapDelete(t *testing.T) {
	f := newFixture(t)
	f.c.Identities.MCPUser = "system:serviceaccount:agent-sandbox:agent-sandbox-mcp"
	f.c.Identities.PoolUsers = []string{"system:serviceaccount:agent-sandbox-system:agent-sandbox-webhook"}
	for _, tt := range []struct {
		user, name string
		ok         bool
	}{
		{"system:serviceaccount:agent-sandbox-system:agent-sandbox-webhook", "tfws-0123", true},
		{"system:serviceaccount:agent-sandbox:agent-sandbox-mcp", "tfws-0123", true},
		{"system:serviceaccount:agent-sandbox:agent-sandbox-mcp", "tfplan-0123", false},
		{"editor", "tfws-0123", false},
		{"editor", "tfplan-0123", false},
		{"editor", "something-else", true},
	} {
		_, err := f.c.CheckConfigMap(context.Background(), Request{Operation: "DELETE", User: tt.user, Name: tt.name}, nil)
		if tt.ok != (err == nil) {
			t.Errorf("%s deletes %s: %v", tt.user, tt.name, err)
		}
	}
}

// TestSubresourceTableDocumented keeps docs/admission.md's table the allowlist's.
func TestSubresourceTableDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/admission.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), SubresourceTable()) {
		t.Fatalf("docs/admission.md does not carry the subresource allowlist; put this table in it:\n%s", SubresourceTable())
	}
}

// bindingOf is the Binding the scheduler sends to bind p to node-a.
func bindingOf(p *corev1.Pod) *corev1.Binding {
	return &corev1.Binding{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Binding"},
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID}, Target: corev1.ObjectReference{Kind: "Node", Name: "node-a"}}
}

func withStatus(v any) map[string]any {
	o := objAny(v)
	o["status"] = map[string]any{"active": int64(1)}
	return o
}

func withLabel(v any) map[string]any {
	o := objAny(v)
	o["metadata"].(map[string]any)["labels"] = map[string]any{"app": "web"}
	return o
}

func tokenRequest(seconds int64) map[string]any {
	return map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": map[string]any{"expirationSeconds": seconds}}
}

func objAny(v any) map[string]any {
	raw, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	o, err := decodeObject(raw)
	if err != nil {
		panic(err)
	}
	return o
}

// TestCheckBinding: a Binding binds a sandbox Pod to a node and nothing else. The API server copies a
// Binding's annotations onto the Pod, and since Kubernetes 1.35 (PodTopologyLabelsAdmission) its labels
// too, so a Binding carries only what the API server itself adds there (the node's topology labels): the
// scheduler writes none. The legacy core v1 bindings resource (POST .../namespaces/NS/bindings) is the
// same code without a subresource, and decided the same.
func TestCheckBinding(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	binding := func(labels, annotations map[string]string) map[string]any {
		return objAny(&corev1.Binding{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Binding"},
			ObjectMeta: metav1.ObjectMeta{Name: "call-pod", Namespace: "agent-sandbox", UID: "a1b2c3d4-0000-4000-8000-000000000001", Labels: labels, Annotations: annotations},
			Target:     corev1.ObjectReference{Kind: "Node", Name: "node-a"}})
	}
	zone := map[string]string{"topology.kubernetes.io/zone": "europe-west1-b", "topology.kubernetes.io/region": "europe-west1"}
	for _, form := range []struct{ resource, sub string }{{"pods", "binding"}, {"bindings", ""}} {
		for _, tt := range []struct {
			name string
			user string
			obj  map[string]any
			rule string // "" = allowed
		}{
			{"the scheduler binds", "system:kube-scheduler", binding(nil, nil), ""},
			{"the scheduler binds to a zoned node (the API server's topology labels)", "system:kube-scheduler", binding(zone, nil), ""},
			{"someone else binds", "attacker", binding(nil, nil), "pod-binding"},
			{"the scheduler's binding changes the tool label", "system:kube-scheduler", binding(map[string]string{contract.LabelTool: "terraform_apply"}, nil), "pod-binding"},
			{"the scheduler's binding adds a label", "system:kube-scheduler", binding(map[string]string{"app": "web"}, nil), "pod-binding"},
			{"the scheduler's binding forges a claim annotation", "system:kube-scheduler", binding(nil, map[string]string{contract.AnnotationClaim: `{"argv":["/agent-sandbox","version"]}`}), "pod-binding"},
			{"the scheduler's binding rewrites the parameters annotation", "system:kube-scheduler", binding(nil, map[string]string{contract.AnnotationParams: `{"namespace":"kube-system"}`}), "pod-binding"},
			{"a binding without an object", "system:kube-scheduler", nil, "pod-binding"},
		} {
			t.Run(strings.TrimSuffix(form.resource+"/"+form.sub, "/")+"/"+tt.name, func(t *testing.T) {
				req := Request{Operation: "CREATE", User: tt.user, Groups: []string{"system:authenticated"}, Resource: form.resource, SubResource: form.sub, Name: "call-pod", Namespace: "agent-sandbox"}
				_, err := f.c.CheckSubresource(ctx, req, tt.obj, nil)
				if tt.rule == "" && err != nil {
					t.Fatalf("refused: %v", err)
				}
				if tt.rule != "" && ruleOf(err) != tt.rule {
					t.Fatalf("want refusal by %s, got %v", tt.rule, err)
				}
				t.Log(err)
			})
		}
	}
}

// TestCheckProtectedServiceAccounts: an edit user of the sandbox namespace who gives a tool's ServiceAccount
// imagePullSecrets (the ServiceAccount admission plugin copies them into every Pod the Job controller then
// makes for it, and exactness refuses that Pod after the approval is spent), deletes it or makes another is
// refused; the chart's identity writes them, the service-account controller creates a bare "default", the namespace
// controller deletes them with the namespace.
func TestCheckProtectedServiceAccounts(t *testing.T) {
	f := newFixture(t)
	admin := []string{"system:masters"}
	const saController = "system:serviceaccount:kube-system:service-account-controller"
	bare := object{"metadata": map[string]any{"name": "default"}}
	pulls := object{"metadata": map[string]any{"name": "default"}, "imagePullSecrets": []any{map[string]any{"name": "regcred"}}}
	for _, tt := range []struct {
		op, user, name string
		groups         []string
		obj            object
		ok             bool
	}{
		{"UPDATE", "editor", "tool-terraform-apply", nil, nil, false},
		{"DELETE", "editor", "tool-terraform-apply", nil, nil, false},
		{"CREATE", "editor", "tool-terraform-apply", nil, nil, false},
		{"CREATE", "editor", "default", nil, bare, false},
		{"UPDATE", "admin", "tool-terraform-apply", admin, nil, true},
		{"CREATE", "admin", "tool-terraform-apply", admin, nil, true},
		{"DELETE", "admin", "tool-terraform-apply", admin, nil, true},
		// The service-account controller makes the namespace's bare "default", nothing else.
		{"CREATE", saController, "default", nil, bare, true},
		{"CREATE", saController, "default", nil, pulls, false},
		{"CREATE", saController, "tool-terraform-apply", nil, object{"metadata": map[string]any{"name": "tool-terraform-apply"}}, false},
		{"UPDATE", saController, "default", nil, bare, false},
		{"DELETE", saController, "default", nil, nil, false},
		{"DELETE", "system:serviceaccount:kube-system:namespace-controller", "tool-terraform-apply", nil, nil, true},
		{"CREATE", "system:serviceaccount:kube-system:namespace-controller", "default", nil, bare, false},
		{"UPDATE", "system:serviceaccount:kube-system:namespace-controller", "tool-terraform-apply", nil, nil, false},
	} {
		_, err := f.c.CheckProtected(context.Background(), Request{Operation: tt.op, User: tt.user, Groups: tt.groups, Resource: "serviceaccounts", Name: tt.name}, tt.obj)
		if tt.ok != (err == nil) || (!tt.ok && ruleOf(err) != "sandbox-namespace") {
			t.Errorf("%s %s ServiceAccount %s: %v", tt.user, tt.op, tt.name, err)
		}
	}
	// The controllers' allowance is for ServiceAccounts only.
	if _, err := f.c.CheckProtected(context.Background(), Request{Operation: "DELETE", User: "system:serviceaccount:kube-system:namespace-controller", Resource: "networkpolicies", Name: "agent-sandbox-default-deny"}, nil); err == nil {
		t.Error("the namespace controller's allowance reached a NetworkPolicy")
	}
}
