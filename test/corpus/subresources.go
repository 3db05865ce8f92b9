package corpus

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
)

// Issue 22: every identity, every subresource. Each case is a server-side dry run where the API allows
// one (if a check failed, nothing would change) and is made by an identity that RBAC (or the Node
// authorizer) lets through, so the refusal is the webhook's own.

// statusWriter is an identity that may write status subresources as far as RBAC is concerned.
type statusWriter struct {
	name   string
	client kubernetes.Interface
	node   bool // a kubelet: NodeRestriction refuses its label changes before any webhook
}

// statusWriters are the identities that RBAC lets write pods/status and jobs/status: the cluster-wide
// admin, the garbage collector (RBAC `*`), the Job controller (jobs/status) and, for pods/status, the
// kubelet of the Pod's own node (the Node authorizer; an RBAC binding in Provision for API servers without
// it).
func (e *Env) statusWriters(pod *corev1.Pod, jobs bool) []statusWriter {
	w := []statusWriter{{name: "cluster-wide admin", client: e.Attacker}, {name: "garbage collector (impersonated)", client: e.GC}}
	if jobs {
		return append(w, statusWriter{name: "Job controller (impersonated)", client: e.JobController})
	}
	return append(w, statusWriter{name: "the Pod's own kubelet (impersonated node " + e.nodeOf(pod) + ")", client: e.Node(e.nodeOf(pod)), node: true})
}

func (e *Env) nodeOf(pod *corev1.Pod) string {
	if pod.Spec.NodeName != "" {
		return pod.Spec.NodeName
	}
	return NodeWithoutPods
}

// metadataForgeries are the metadata changes a status write must never make.
func metadataForgeries(run string) []struct {
	name string
	f    func(*metav1.ObjectMeta)
} {
	return []struct {
		name string
		f    func(*metav1.ObjectMeta)
	}{
		{"forges a claim annotation", func(m *metav1.ObjectMeta) {
			if m.Annotations == nil {
				m.Annotations = map[string]string{}
			}
			m.Annotations[contract.AnnotationClaim] = `{"requestID":"req-forged` + run + `","argv":["/agent-sandbox","version"]}`
		}},
		{"rewrites the parameters annotation", func(m *metav1.ObjectMeta) {
			m.Annotations[contract.AnnotationParams] = `{"namespace":"kube-system"}`
		}},
		{"changes the tool label", func(m *metav1.ObjectMeta) { m.Labels[contract.LabelTool] = "terraform_apply" }},
		{"adds the orphan finalizer", func(m *metav1.ObjectMeta) { m.Finalizers = append(m.Finalizers, "orphan") }},
		// Not here: owner references. The API server keeps a Pod's own through pods/status, whatever the
		// request says (the live corpus saw a dry run "admitted" with them unchanged).
	}
}

// statusCases write pods/status and jobs/status of the admitted safe Job and its Pod.
func (e *Env) statusCases(job *batchv1.Job, pod *corev1.Pod) []Case {
	ns := e.Namespace()
	var cases []Case
	for _, w := range e.statusWriters(pod, false) {
		for _, m := range metadataForgeries(e.Run) {
			if w.node && m.name == "changes the tool label" {
				continue
			}
			cases = append(cases, Case{Class: "status", Name: fmt.Sprintf("pods/status: %s %s", w.name, m.name), Rule: "pod-status",
				Submit: func(ctx context.Context) error {
					cur, err := e.Admin.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
					if err != nil {
						return err
					}
					m.f(&cur.ObjectMeta)
					_, err = w.client.CoreV1().Pods(ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{DryRun: dryRun})
					return err
				}})
		}
	}
	cases = append(cases, Case{Class: "status", Name: "pods/status: cluster-wide admin reports the Pod Succeeded (not its node)", Rule: "pod-status",
		Submit: func(ctx context.Context) error {
			cur, err := e.Admin.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cur.Status.Phase = corev1.PodSucceeded
			_, err = e.Attacker.CoreV1().Pods(ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{DryRun: dryRun})
			return err
		}})
	for _, w := range e.statusWriters(pod, true) {
		for _, m := range metadataForgeries(e.Run) {
			cases = append(cases, Case{Class: "status", Name: fmt.Sprintf("jobs/status: %s %s", w.name, m.name), Rule: "job-status",
				Submit: func(ctx context.Context) error {
					cur, err := e.Admin.BatchV1().Jobs(ns).Get(ctx, job.Name, metav1.GetOptions{})
					if err != nil {
						return err
					}
					m.f(&cur.ObjectMeta)
					_, err = w.client.BatchV1().Jobs(ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{DryRun: dryRun})
					return err
				}})
		}
	}
	cases = append(cases, Case{Class: "status", Name: "jobs/status: cluster-wide admin marks the Job complete (not the Job controller)", Rule: "job-status",
		Submit: func(ctx context.Context) error {
			cur, err := e.Admin.BatchV1().Jobs(ns).Get(ctx, job.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cur.Status.Succeeded = 1
			_, err = e.Attacker.BatchV1().Jobs(ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{DryRun: dryRun})
			return err
		}})
	return cases
}

// namespaceSubresourceCases remove the sandbox namespace's labels through namespaces/status and
// namespaces/finalize (issue 22, finding 2), as every identity that RBAC lets write them, the chart's own
// included: metadata never changes through a subresource.
func (e *Env) namespaceSubresourceCases() []Case {
	ns := e.Namespace()
	writers := []statusWriter{{name: "the chart's identity (system:masters)", client: e.Admin}, {name: "cluster-wide admin", client: e.Attacker},
		{name: "garbage collector (impersonated)", client: e.GC}, {name: "namespace controller (impersonated)", client: e.NamespaceController}}
	removals := []struct{ name, label string }{
		{"removes the agent-sandbox.dev/sandbox label", contract.LabelSandboxNamespace},
		{"removes the Pod Security enforce label", "pod-security.kubernetes.io/enforce"},
	}
	var cases []Case
	for _, sub := range []string{"status", "finalize"} {
		for _, w := range writers {
			for _, r := range removals {
				cases = append(cases, Case{Class: "namespace", Name: fmt.Sprintf("namespaces/%s: %s %s", sub, w.name, r.name), Rule: "sandbox-namespace",
					Submit: func(ctx context.Context) error {
						cur, err := e.Admin.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
						if err != nil {
							return err
						}
						delete(cur.Labels, r.label)
						if sub == "status" {
							_, err = w.client.CoreV1().Namespaces().UpdateStatus(ctx, cur, metav1.UpdateOptions{DryRun: dryRun})
						} else {
							_, err = w.client.CoreV1().Namespaces().Finalize(ctx, cur, metav1.UpdateOptions{DryRun: dryRun})
						}
						return err
					}})
			}
		}
	}
	cases = append(cases, Case{Class: "namespace", Name: "namespaces/finalize: cluster-wide admin empties spec.finalizers (not the namespace controller)", Rule: "sandbox-namespace",
		Submit: func(ctx context.Context) error {
			cur, err := e.Admin.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cur.Spec.Finalizers = nil
			_, err = e.Attacker.CoreV1().Namespaces().Finalize(ctx, cur, metav1.UpdateOptions{DryRun: dryRun})
			return err
		}})
	return cases
}

// orphanCases let a sandbox Pod escape its Job: deletes that orphan it, owner references removed, the
// orphan finalizer added (issue 22).
func (e *Env) orphanCases(job *batchv1.Job, pod *corev1.Pod) []Case {
	ns := e.Namespace()
	orphan := metav1.DeletePropagationOrphan
	deletes := []struct {
		name string
		opts metav1.DeleteOptions
	}{
		{"with no propagation policy (batch/v1 orphans by default)", metav1.DeleteOptions{}},
		{"with propagationPolicy Orphan", metav1.DeleteOptions{PropagationPolicy: &orphan}},
		{"with orphanDependents true", metav1.DeleteOptions{OrphanDependents: ptr.To(true)}},
	}
	var cases []Case
	for _, w := range []statusWriter{{name: "MCP server", client: e.MCP}, {name: "edit user", client: e.Edit}, {name: "cluster-wide admin", client: e.Attacker}} {
		for _, d := range deletes {
			cases = append(cases, Case{Class: "orphan", Name: fmt.Sprintf("%s deletes an admitted Job %s", w.name, d.name), Rule: "no-orphans",
				Submit: func(ctx context.Context) error {
					o := d.opts
					o.DryRun = dryRun
					return w.client.BatchV1().Jobs(ns).Delete(ctx, job.Name, o)
				}})
		}
	}
	for _, w := range []statusWriter{{name: "edit user", client: e.Edit}, {name: "cluster-wide admin", client: e.Attacker}, {name: "Job controller (impersonated)", client: e.JobController}} {
		cases = append(cases, Case{Class: "orphan", Name: w.name + " removes a sandbox Pod's owner reference (not the garbage collector)", Rule: "immutable",
			Submit: func(ctx context.Context) error {
				_, err := w.client.CoreV1().Pods(ns).Patch(ctx, pod.Name, types.MergePatchType, []byte(`{"metadata":{"ownerReferences":null}}`), metav1.PatchOptions{DryRun: dryRun})
				return err
			}})
	}
	for _, w := range []statusWriter{{name: "edit user", client: e.Edit}, {name: "cluster-wide admin", client: e.Attacker}, {name: "garbage collector (impersonated)", client: e.GC}} {
		cases = append(cases, Case{Class: "orphan", Name: w.name + " adds the orphan finalizer to an admitted Job", Rule: "immutable",
			Submit: func(ctx context.Context) error {
				cur, err := e.Admin.BatchV1().Jobs(ns).Get(ctx, job.Name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				cur.Finalizers = append(cur.Finalizers, "orphan")
				_, err = w.client.BatchV1().Jobs(ns).Update(ctx, cur, metav1.UpdateOptions{DryRun: dryRun})
				return err
			}})
	}
	for _, w := range []statusWriter{{name: "edit user", client: e.Edit}, {name: "cluster-wide admin", client: e.Attacker}} {
		cases = append(cases, Case{Class: "orphan", Name: w.name + " evicts a Pod that carries a call", Rule: "no-eviction",
			Submit: func(ctx context.Context) error {
				ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: ns}, DeleteOptions: &metav1.DeleteOptions{DryRun: dryRun}}
				return w.client.CoreV1().Pods(ns).EvictV1(ctx, ev)
			}})
	}
	return cases
}

// ownObjectCases attack the product's own objects in the sandbox namespace: the MCP server's token and
// the workspaces and saved plans pending approvals need (issue 22).
func (e *Env) ownObjectCases() []Case {
	ns := e.Namespace()
	token := func(c kubernetes.Interface, seconds int64) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			_, err := c.CoreV1().ServiceAccounts(ns).CreateToken(ctx, e.MCPServiceAccount, &authenticationv1.TokenRequest{
				Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(seconds)}}, metav1.CreateOptions{DryRun: dryRun})
			return err
		}
	}
	c := func(n, rule string, f func(ctx context.Context) error) Case {
		return Case{Class: "own-objects", Name: n, Rule: rule, Submit: f}
	}
	ws, plan := e.contentTargets()
	del := func(who kubernetes.Interface, cm *corev1.ConfigMap) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			// Published as the MCP server publishes it; a dry-run delete of a missing one would be a 404.
			if _, err := e.MCP.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("setup: publishing %s was refused: %w", cm.Name, err)
			}
			return who.CoreV1().ConfigMaps(ns).Delete(ctx, cm.Name, metav1.DeleteOptions{DryRun: dryRun})
		}
	}
	return []Case{
		c("edit user mints a one-year token for the MCP server's ServiceAccount", "mcp-token", token(e.Edit, 365*24*3600)),
		c("edit user mints a one-hour token for the MCP server's ServiceAccount", "mcp-token", token(e.Edit, 3600)),
		c("cluster-wide admin (not the chart's identity) mints an MCP token", "mcp-token", token(e.Attacker, 3600)),
		c("the chart's identity mints a one-year MCP token", "mcp-token", token(e.Admin, 365*24*3600)),
		c("edit user deletes a workspace ConfigMap (tfws-)", "content-addressed", del(e.Edit, ws)),
		c("cluster-wide admin deletes a workspace ConfigMap (tfws-)", "content-addressed", del(e.Attacker, ws)),
		c("edit user deletes a saved-plan ConfigMap (tfplan-)", "content-addressed", del(e.Edit, plan)),
		c("MCP server deletes a saved-plan ConfigMap (tfplan-) a pending approval needs", "content-addressed", del(e.MCP, plan)),
		c("MCP server deletes the API server CA the credential agent trusts", "sandbox-namespace", func(ctx context.Context) error {
			return e.MCP.CoreV1().ConfigMaps(ns).Delete(ctx, e.Policy.Spec.Sandbox.CredentialAgent.APIServerCACertConfigMap, metav1.DeleteOptions{DryRun: dryRun})
		}),
		c("garbage collector (impersonated) deletes a saved-plan ConfigMap (tfplan-)", "content-addressed", del(e.GC, plan)),
	}
}

// contentTargets are a workspace and a saved-plan ConfigMap as the MCP server publishes them.
func (e *Env) contentTargets() (ws, plan *corev1.ConfigMap) {
	files := map[string]string{"main.tf": "# corpus delete target " + e.Run + "\n"}
	ws = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: sandbox.WorkspaceConfigMapName(files), Labels: map[string]string{sandbox.LabelWorkspace: "true"}},
		Immutable: ptr.To(true), Data: files}
	body := []byte("PK\x03\x04 corpus saved plan " + e.Run)
	sum := sha256.Sum256(body)
	plan = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: contract.PlanConfigMapPrefix + hex.EncodeToString(sum[:])},
		Immutable: ptr.To(true), BinaryData: map[string][]byte{sandbox.PlanKey: body}}
	return ws, plan
}
