package webhook

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/rules"
)

// Subresources by allowlist (docs/architecture.md, invariants 3 and 5). The webhook sees every subresource of
// every object in a sandbox namespace, and every subresource of the sandbox Namespace object, and refuses
// each one that is not listed here — so a subresource that a future Kubernetes adds is refused until
// somebody decides who may use it and for what. Metadata never changes through a subresource: status and
// finalize writes that touch labels, annotations, owner references or finalizers are refused for everyone,
// the chart's identity included (the API server lets pods/status and namespaces/finalize change them, which
// was a way to forge a warm claim and to switch the webhook off for the namespace).
//
// docs/admission.md lists the same table; a test keeps the two in step.

// SubresourceUse is one allowlisted use of a subresource: who may make it, and what it may change.
type SubresourceUse struct {
	Resource    string   // e.g. pods
	Subresource string   // e.g. status; empty for bindings, the one resource that is a subresource in all but name
	Operations  []string // admission operations: CREATE, UPDATE, DELETE, CONNECT
	Who         string   // who may, in words
	Why         string   // what for, and what it may not change
	check       func(c *Checker, ctx context.Context, req Request, obj, old object) error
}

// RefusedSubresource is a subresource refused for everyone, with the reason.
type RefusedSubresource struct {
	Resource, Subresource string
	Rule                  rules.ID
	Why                   string
}

// Default identities of the controllers that write status subresources (kube-controller-manager with and
// without --use-service-account-credentials).
var (
	// DefaultStatusControllerUsers may write the status of a sandbox Pod besides its own node and the
	// scheduler: they mark Pods not ready, add disruption conditions, or fail orphaned Pods.
	DefaultStatusControllerUsers = []string{
		"system:kube-controller-manager",
		"system:serviceaccount:kube-system:node-controller",
		"system:serviceaccount:kube-system:pod-garbage-collector",
		"system:serviceaccount:kube-system:taint-eviction-controller",
		"system:serviceaccount:kube-system:disruption-controller",
		"system:serviceaccount:kube-system:job-controller",
	}
	// DefaultNamespaceControllerUsers finalize a namespace that is being deleted.
	DefaultNamespaceControllerUsers = []string{"system:kube-controller-manager", "system:serviceaccount:kube-system:namespace-controller"}
	// DefaultQuotaControllerUsers recompute a ResourceQuota's usage.
	DefaultQuotaControllerUsers = []string{"system:kube-controller-manager", "system:serviceaccount:kube-system:resourcequota-controller"}
	// DefaultGCUsers are the garbage collector: the only identity that may remove a sandbox Pod's owner
	// reference.
	DefaultGCUsers = []string{"system:kube-controller-manager", "system:serviceaccount:kube-system:generic-garbage-collector"}
	// DefaultServiceAccountControllerUsers create the "default" ServiceAccount of a namespace that lacks one.
	DefaultServiceAccountControllerUsers = []string{"system:kube-controller-manager", "system:serviceaccount:kube-system:service-account-controller"}
)

// RefusedSubresources are refused for everybody.
var RefusedSubresources = []RefusedSubresource{
	{"pods", "exec", rules.NoPodAccess, "exec into a sandbox Pod would reach the container that holds the credential"},
	{"pods", "attach", rules.NoPodAccess, "attaching to a sandbox Pod would reach the container that holds the credential"},
	{"pods", "portforward", rules.NoPodAccess, "port-forwarding into a sandbox Pod would open a way in"},
	{"pods", "proxy", rules.NoPodAccess, "proxying to a sandbox Pod would open a way in"},
	{"pods", "ephemeralcontainers", rules.NoEphemeralContainers, "an ephemeral (debug) container would run arbitrary code beside the credential"},
	{"pods", "resize", rules.NoPodResize, "resizing would change the CPU and memory limits the policy set"},
}

// SubresourceAllowlist is every subresource use the webhook admits in a sandbox namespace.
var SubresourceAllowlist = []SubresourceUse{
	{Resource: "pods", Subresource: "binding", Operations: []string{"CREATE"},
		Who: "the scheduler", Why: "binds a sandbox Pod to a node; carries no labels or annotations but the node's topology labels the API server adds",
		check: func(c *Checker, _ context.Context, req Request, obj, _ object) error {
			return c.checkBinding(req, obj)
		}},
	{Resource: "bindings", Operations: []string{"CREATE"},
		Who: "the scheduler", Why: "the legacy form of `pods/binding` (no subresource; its own webhook registration), decided the same",
		check: func(c *Checker, _ context.Context, req Request, obj, _ object) error {
			return c.checkBinding(req, obj)
		}},
	{Resource: "pods", Subresource: "status", Operations: []string{"UPDATE"},
		Who: "the kubelet of the Pod's own node, the scheduler, the node, Pod-GC, taint-eviction, disruption and Job controllers, the chart's identity",
		Why: "reports what a Pod does; never its metadata (a claim, labels, owners, finalizers)",
		check: func(c *Checker, _ context.Context, req Request, obj, old object) error {
			node, _ := old.spec()["nodeName"].(string)
			ok := c.isAdmin(req) || c.isNode(req, node) ||
				contains(orDefault(c.Identities.SchedulerUsers, DefaultSchedulerUsers), req.User) ||
				contains(orDefault(c.Identities.StatusControllerUsers, DefaultStatusControllerUsers), req.User)
			if !ok {
				return deny(rules.PodStatus, "the status of sandbox Pod %s is written by its node's kubelet and the cluster's controllers, not by %s", req.Name, req.User)
			}
			return sameMetadata(rules.PodStatus, "Pod", req, obj, old)
		}},
	{Resource: "pods", Subresource: "eviction", Operations: []string{"CREATE"},
		Who: "anyone RBAC allows, for a warm Pod nobody has claimed",
		Why: "stops an idle warm Pod (the pool replaces it); a Pod that carries a call is never evicted",
		check: func(c *Checker, ctx context.Context, req Request, _, _ object) error {
			return c.checkEviction(ctx, req)
		}},
	{Resource: "jobs", Subresource: "status", Operations: []string{"UPDATE"},
		Who: "the Job controller, the chart's identity",
		Why: "reports a Job's progress; never its metadata",
		check: controllerWrites(rules.JobStatus, "Job", "the Job controller",
			func(id Identities) []string { return orDefault(id.JobControllerUsers, DefaultJobControllerUsers) })},
	{Resource: "serviceaccounts", Subresource: "token", Operations: []string{"CREATE"},
		Who: "the kubelet (tool ServiceAccounts, bound to a sandbox Pod on its node that the webhook admitted: the exact rendering of its existing Job); the chart's identity (the MCP ServiceAccount, at most 24 h)",
		Why: "a tool's Vault login; the MCP server's kubeconfig",
		check: func(c *Checker, ctx context.Context, req Request, obj, _ object) error {
			_, err := c.CheckTokenRequest(ctx, req, obj)
			return err
		}},
	{Resource: "resourcequotas", Subresource: "status", Operations: []string{"UPDATE"},
		Who: "the resource-quota controller, the API server (system:masters), the chart's identity",
		Why: "records what the namespace uses; a forged usage would lift the quota",
		check: controllerWrites(rules.SandboxNamespace, "ResourceQuota", "the quota controller",
			func(id Identities) []string { return orDefault(id.QuotaControllerUsers, DefaultQuotaControllerUsers) })},
	{Resource: "namespaces", Subresource: "status", Operations: []string{"UPDATE"},
		Who:   "the namespace controller, the chart's identity",
		Why:   "reports a namespace's phase; never its labels (they switch the webhook and Pod Security on)",
		check: namespaceSubresource},
	{Resource: "namespaces", Subresource: "finalize", Operations: []string{"UPDATE"},
		Who:   "the namespace controller, the chart's identity",
		Why:   "removes spec.finalizers of a namespace being deleted; never its labels",
		check: namespaceSubresource},
}

var namespaceSubresource = controllerWrites(rules.SandboxNamespace, "Namespace", "the namespace controller",
	func(id Identities) []string {
		return orDefault(id.NamespaceControllerUsers, DefaultNamespaceControllerUsers)
	})

// controllerWrites is the check of a status-like subresource that one controller (users) and the chart's
// identity write, never changing the object's metadata.
func controllerWrites(rule rules.ID, kind, controller string, users func(Identities) []string) func(*Checker, context.Context, Request, object, object) error {
	return func(c *Checker, _ context.Context, req Request, obj, old object) error {
		if !c.isAdmin(req) && !contains(users(c.Identities), req.User) {
			return deny(rule, "%s/%s of sandbox %s %s is written by %s, not by %s", req.Resource, req.SubResource, kind, req.Name, controller, req.User)
		}
		return sameMetadata(rule, kind, req, obj, old)
	}
}

// CheckSubresource decides on any subresource request in a sandbox namespace, or on the sandbox
// Namespace object: allowed only as an entry of SubresourceAllowlist allows it.
func (c *Checker) CheckSubresource(ctx context.Context, req Request, obj, old object) (*Decision, error) {
	for _, r := range RefusedSubresources {
		if r.Resource == req.Resource && r.Subresource == req.SubResource {
			return nil, deny(r.Rule, "%s/%s is refused on sandbox objects: %s", req.Resource, req.SubResource, r.Why)
		}
	}
	for _, u := range SubresourceAllowlist {
		if u.Resource != req.Resource || u.Subresource != req.SubResource {
			continue
		}
		if !slices.Contains(u.Operations, req.Operation) {
			break
		}
		if u.check != nil {
			if err := u.check(c, ctx, req, obj, old); err != nil {
				return nil, err
			}
		}
		return &Decision{Tool: old.labels()[contract.LabelTool]}, nil
	}
	return nil, deny(rules.SubresourceAllowlist, "%s %s/%s is not on the webhook's list of allowed subresource uses in the sandbox namespace (refused by default; docs/admission.md)",
		strings.ToLower(req.Operation), req.Resource, req.SubResource)
}

// sameMetadata refuses a subresource write that changes the object's metadata beyond the API server's own
// bookkeeping (resourceVersion, managedFields, generation).
func sameMetadata(rule rules.ID, kind string, req Request, obj, old object) error {
	if old == nil || obj == nil {
		return deny(rule, "a %s/%s write without the old and new object cannot be checked", req.Resource, req.SubResource)
	}
	n, o := withoutServerFields(obj)["metadata"], withoutServerFields(old)["metadata"]
	if m := diff("metadata", n, o); m != nil {
		return deny(rule, "metadata of a sandbox %s never changes through %s/%s (%s)", kind, req.Resource, req.SubResource,
			strings.Replace(m.String(), "the policy renders", "it had", 1))
	}
	return nil
}

// checkBinding decides on a Binding of a sandbox Pod: only the scheduler binds, and a Binding changes
// nothing but the Pod's node. The API server copies a Binding's annotations onto the Pod, and since
// Kubernetes 1.35 (PodTopologyLabelsAdmission, on by default) its labels too, so a Binding could rewrite
// the metadata the webhook refuses to change everywhere else (a claim, the tool, the parameters). The
// scheduler's Binding carries no labels or annotations (kube-scheduler's DefaultBinder); the only ones
// allowed are the node's topology labels, which the API server's PodTopologyLabels admission plugin adds
// to it before any webhook sees it. An allowlist: whatever else a Binding carries is refused.
func (c *Checker) checkBinding(req Request, obj object) error {
	if !contains(orDefault(c.Identities.SchedulerUsers, DefaultSchedulerUsers), req.User) {
		return deny(rules.PodBinding, "only the scheduler binds sandbox Pods to nodes, not %s", req.User)
	}
	if obj == nil {
		return deny(rules.PodBinding, "a Binding without its object cannot be checked")
	}
	meta := obj.meta()
	if a, _ := meta["annotations"].(map[string]any); len(a) > 0 {
		return deny(rules.PodBinding, "a Binding of sandbox Pod %s carries no annotations (the API server would copy %s onto the Pod)", req.Name, sortedKeys(a))
	}
	labels, _ := meta["labels"].(map[string]any)
	for _, k := range sortedKeys(labels) {
		if !slices.Contains(topologyLabels, k) {
			return deny(rules.PodBinding, "a Binding of sandbox Pod %s carries no label but the node's topology labels %v, not %s (the API server would copy it onto the Pod)", req.Name, topologyLabels, k)
		}
	}
	return nil
}

// isNode reports whether the request comes from the kubelet of node (its node identity).
func (c *Checker) isNode(req Request, node string) bool {
	name, ok := strings.CutPrefix(req.User, "system:node:")
	return ok && node != "" && name == node && contains(req.Groups, "system:nodes")
}

// checkEviction refuses to evict a sandbox Pod that carries a call: a claimed warm Pod, or a call's own
// Pod. An idle warm Pod may go; the pool makes another.
func (c *Checker) checkEviction(ctx context.Context, req Request) error {
	if c.Cluster == nil {
		return deny(rules.NoEviction, "the webhook cannot read Pods to check what an eviction would stop")
	}
	pod, err := c.Cluster.GetPod(ctx, req.Namespace, req.Name)
	if isNotFound(err) {
		return nil // nothing to evict; the API server answers 404
	}
	if err != nil {
		return deny(rules.NoEviction, "cannot read Pod %s: %v", req.Name, err)
	}
	if isWarm(pod.Labels) && pod.Annotations[contract.AnnotationClaim] == "" {
		return nil
	}
	what := "a call's sandbox Pod"
	if isWarm(pod.Labels) {
		what = "a claimed warm Pod"
	}
	return deny(rules.NoEviction, "Pod %s is %s: it is not evicted, it ends by its own deadline (delete it to stop the call)", req.Name, what)
}

func (o object) spec() map[string]any {
	m, _ := o["spec"].(map[string]any)
	return m
}

func orDefault(list, def []string) []string {
	if len(list) == 0 {
		return def
	}
	return list
}

// SubresourceTable renders the allowlist as the Markdown table docs/admission.md carries.
func SubresourceTable() string {
	var b strings.Builder
	b.WriteString("| subresource | operations | who | what for |\n|---|---|---|---|\n")
	for _, u := range SubresourceAllowlist {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", strings.TrimSuffix(u.Resource+"/"+u.Subresource, "/"), strings.Join(u.Operations, ", "), u.Who, u.Why)
	}
	for _, r := range RefusedSubresources {
		fmt.Fprintf(&b, "| `%s/%s` | all | nobody (`%s`) | %s |\n", r.Resource, r.Subresource, r.Rule, r.Why)
	}
	b.WriteString("| any other | all | nobody (`subresource-allowlist`) | refused by default, including subresources a future Kubernetes adds |\n")
	return b.String()
}
