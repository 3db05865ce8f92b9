package corpus

import (
	"context"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// Identities are the API identities the corpus attacks with.
type Identities struct {
	// Admin is the chart's own identity (system:masters): set-up and clean-up only.
	Admin kubernetes.Interface
	// Attacker holds every RBAC right in the cluster (cluster-admin through a ClusterRoleBinding) but is
	// neither the chart's identity nor a controller: what it submits to the sandbox namespace is stopped by
	// nothing but the webhook. It is not stopped from switching the webhook off: admission never sees a
	// change to the webhook configurations, and whoever may impersonate the group system:masters or a node,
	// or write the release namespace (the trusted approver keys), is as trusted as the chart's identity
	// (docs/admission.md, "Who the webhook cannot stop"). The corpus attacks it with only what admission can
	// decide.
	Attacker kubernetes.Interface
	// Edit is an ordinary user with the built-in edit role in the sandbox namespace.
	Edit kubernetes.Interface
	// MCP is the MCP server's ServiceAccount, with the chart's role.
	MCP kubernetes.Interface
	// JobController is the Job controller's identity (the admin impersonating it).
	JobController kubernetes.Interface
	// GC is the garbage collector's identity and NamespaceController the namespace controller's (the admin
	// impersonating them; RBAC gives both wide rights).
	GC, NamespaceController kubernetes.Interface
	// EditUser names Edit in admission requests.
	EditUser string
	// MCPServiceAccount is the MCP server's ServiceAccount in the sandbox namespace.
	MCPServiceAccount string

	admin *rest.Config
	// editConfig authenticates as Edit (its ServiceAccount's token).
	editConfig *rest.Config

	cleanup func(context.Context)
}

// CorpusNamespace holds the corpus's own ServiceAccounts.
const CorpusNamespace = "agent-sandbox-corpus"

// Provision creates the attacking identities: ServiceAccounts in CorpusNamespace bound to cluster-admin
// and to edit in the sandbox namespace, a token for each and for the MCP server's ServiceAccount
// (mcpServiceAccount in the sandbox namespace, which the chart creates), and an impersonating client for
// the Job controller. admin must be system:masters. Close removes what Provision created.
func Provision(ctx context.Context, admin *rest.Config, sandboxNS, mcpServiceAccount string) (*Identities, error) {
	cs, err := kubernetes.NewForConfig(admin)
	if err != nil {
		return nil, err
	}
	id := &Identities{Admin: cs, admin: admin, MCPServiceAccount: mcpServiceAccount}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: CorpusNamespace}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create namespace %s: %w", CorpusNamespace, err)
	}
	for _, sa := range []string{"attacker", "editor"} {
		o := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: CorpusNamespace}}
		if _, err := cs.CoreV1().ServiceAccounts(CorpusNamespace).Create(ctx, o, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("create ServiceAccount %s: %w", sa, err)
		}
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "agent-sandbox-corpus-attacker"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: CorpusNamespace, Name: "attacker"}}}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("bind the attacker to cluster-admin: %w", err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "agent-sandbox-corpus-editor", Namespace: sandboxNS},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: CorpusNamespace, Name: "editor"}}}
	if _, err := cs.RbacV1().RoleBindings(sandboxNS).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("bind the editor to edit: %w", err)
	}
	id.cleanup = func(ctx context.Context) {
		_ = cs.RbacV1().RoleBindings(sandboxNS).Delete(ctx, rb.Name, metav1.DeleteOptions{})
		_ = cs.RbacV1().ClusterRoleBindings().Delete(ctx, crb.Name, metav1.DeleteOptions{})
		_ = cs.CoreV1().Namespaces().Delete(ctx, CorpusNamespace, metav1.DeleteOptions{})
	}
	var last *rest.Config
	as := func(ns, sa string) (kubernetes.Interface, error) {
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600))}}, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("token for %s/%s: %w", ns, sa, err)
		}
		last = rest.AnonymousClientConfig(admin)
		last.BearerToken = tr.Status.Token
		tuned(last)
		return kubernetes.NewForConfig(last)
	}
	if id.Attacker, err = as(CorpusNamespace, "attacker"); err != nil {
		return nil, err
	}
	if id.Edit, err = as(CorpusNamespace, "editor"); err != nil {
		return nil, err
	}
	id.editConfig = last
	id.EditUser = "system:serviceaccount:" + CorpusNamespace + ":editor"
	if id.MCP, err = as(sandboxNS, mcpServiceAccount); err != nil {
		return nil, err
	}
	controller := func(name string) kubernetes.Interface {
		return id.Impersonate("system:serviceaccount:kube-system:"+name, "system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated")
	}
	id.JobController = controller("job-controller")
	id.GC = controller("generic-garbage-collector")
	id.NamespaceController = controller("namespace-controller")
	return id, nil
}

// NodeWithoutPods names the node the corpus impersonates for a Pod that is bound to none (an API server
// without a scheduler).
const NodeWithoutPods = "agent-sandbox-corpus-node"

// Impersonate is a client that acts as user in groups (the admin impersonating them).
func (id *Identities) Impersonate(user string, groups ...string) kubernetes.Interface {
	c := rest.CopyConfig(id.admin)
	c.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	c.WarningHandler = rest.NoWarnings{}
	cs, err := kubernetes.NewForConfig(c)
	if err != nil {
		panic(err) // only a malformed config fails, and Provision's worked
	}
	return cs
}

// Node is a client that acts as the kubelet of node.
func (id *Identities) Node(node string) kubernetes.Interface {
	return id.Impersonate("system:node:"+node, "system:nodes", "system:authenticated")
}

// Scheduler is a client that acts as the default scheduler (system:kube-scheduler), which RBAC lets bind
// Pods.
func (id *Identities) Scheduler() kubernetes.Interface {
	return id.Impersonate("system:kube-scheduler", "system:authenticated")
}

// GrantNodeRBAC binds the built-in system:node ClusterRole to node's user, for API servers that run
// without the Node authorizer (envtest): the corpus's node cases must reach admission. Close removes it.
func (id *Identities) GrantNodeRBAC(ctx context.Context, node string) error {
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "agent-sandbox-corpus-node"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "system:node:" + node}}}
	if _, err := id.Admin.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("bind system:node to %s: %w", node, err)
	}
	prev := id.cleanup
	id.cleanup = func(ctx context.Context) {
		_ = id.Admin.RbacV1().ClusterRoleBindings().Delete(ctx, crb.Name, metav1.DeleteOptions{})
		prev(ctx)
	}
	return nil
}

// Close removes the identities Provision created.
func (id *Identities) Close(ctx context.Context) {
	if id != nil && id.cleanup != nil {
		id.cleanup(ctx)
	}
}
