package broker

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	rbacv1client "k8s.io/client-go/kubernetes/typed/rbac/v1"

	"github.com/agent-sandbox/agent-sandbox/internal/policy"
)

// Names of the cluster objects that give Vault its rights.
const (
	// DefaultVaultNamespace holds Vault's own identity in the cluster.
	DefaultVaultNamespace = "agent-sandbox-system"
	// VaultServiceAccount is Vault's ServiceAccount there; VaultTokenSecret its long-lived token.
	VaultServiceAccount = "vault"
	VaultTokenSecret    = "vault-token"
	// tokenReviewName names the ClusterRole and ClusterRoleBinding that let Vault review sandbox tokens
	// (create TokenReviews), which the Kubernetes auth method does at every login. (Releases before the
	// JWT auth method bound the same name to system:auth-delegator; Configure replaces that binding.)
	tokenReviewName = "agent-sandbox-vault-tokenreview"
	// vaultRBACName names the Role and RoleBinding that let Vault mint credentials in a target namespace.
	vaultRBACName = "agent-sandbox-vault"

	labelManagedBy = "app.kubernetes.io/managed-by"
	labelComponent = "app.kubernetes.io/component"
	managedBy      = "agent-sandbox"
	componentVault = "vault"
)

// secretsEngineRules are the calls the Kubernetes secrets engine makes in a target namespace for a role with
// kubernetes_role_name (its integration test's ClusterRole, less what we do not use: it creates no Role, no
// ClusterRoleBinding, since every credential is bound in one namespace, and needs no `get namespaces`, used
// only for namespace label selectors). The `bind` on the scopes' ClusterRoles is added per namespace by
// vaultRole.
var secretsEngineRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, Verbs: []string{"create", "delete"}},
	{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, Verbs: []string{"create"}},
	{APIGroups: []string{rbacv1.GroupName}, Resources: []string{"rolebindings"}, Verbs: []string{"create", "delete"}},
}

// tokenReviewRules are all Vault needs cluster-wide: to ask the API server whether a sandbox's token is
// still valid. Not system:auth-delegator, which also lets its holder ask what any user may do
// (SubjectAccessReviews).
var tokenReviewRules = []rbacv1.PolicyRule{
	{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
}

func tokenReviewClusterRole() *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{ObjectMeta: managedMeta("", tokenReviewName), Rules: tokenReviewRules}
}

func tokenReviewClusterRoleBinding(vaultNS string) *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{
		ObjectMeta: managedMeta("", tokenReviewName),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: tokenReviewName},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: vaultNS, Name: VaultServiceAccount}},
	}
}

// vaultRole is the Role Vault holds in one target namespace.
//
// Each scope's rights are a ClusterRole that Configure writes once (scopeClusterRole); a credential is a
// ServiceAccount bound to it in the target namespace by a RoleBinding, both made by Vault and deleted when
// the lease ends. RBAC's escalation prevention lets a subject bind a role only if it holds the role's
// permissions or the `bind` verb on that role; Vault gets `bind` on exactly the ClusterRoles of the scopes
// that may be minted in this namespace, by name, so it can grant what the policy lets it grant here and
// nothing else. It cannot create or change a Role or ClusterRole at all, nor bind one cluster-wide.
func vaultRole(ns string, scopes []*policy.Scope) *rbacv1.Role {
	rules := slices.Clone(secretsEngineRules)
	var names []string
	for _, s := range scopes {
		names = append(names, ScopeRoleName(s))
	}
	if len(names) > 0 {
		slices.Sort(names)
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{rbacv1.GroupName}, Resources: []string{"clusterroles"},
			Verbs: []string{"bind"}, ResourceNames: slices.Compact(names)})
	}
	return &rbacv1.Role{ObjectMeta: managedMeta(ns, vaultRBACName), Rules: rules}
}

// ScopeRoleName names the ClusterRole that holds a scope's rights: "agent-sandbox-scope-<scope>".
func ScopeRoleName(s *policy.Scope) string { return policy.VaultPrefix + "scope-" + s.Name }

// scopeClusterRole holds the rights of one scope. A ClusterRole rather than a Role in each target namespace,
// because a namespace's own administrators may edit the Roles there (and so widen every later credential)
// but not a ClusterRole; it grants nothing until a RoleBinding in a target namespace binds it, and then only
// in that namespace.
func scopeClusterRole(s *policy.Scope) *rbacv1.ClusterRole {
	meta := managedMeta("", ScopeRoleName(s))
	meta.Labels[LabelScope] = s.Name
	return &rbacv1.ClusterRole{ObjectMeta: meta, Rules: rbacRules(s)}
}

func vaultRoleBinding(ns, vaultNS string) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		ObjectMeta: managedMeta(ns, vaultRBACName),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: vaultRBACName},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: vaultNS, Name: VaultServiceAccount}},
	}
}

func managedMeta(ns, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: name, Labels: managedLabels()}
}

func managedLabels() map[string]string {
	return map[string]string{labelManagedBy: managedBy, labelComponent: componentVault}
}

// clusterStep is one change to the cluster.
type clusterStep struct {
	Change
	apply func(context.Context) error
}

// planCluster reads the cluster and returns the changes that give Vault its identity and rights for the
// policy, and the number of objects already as desired. It changes nothing. A target namespace that does
// not exist is an error: Vault could not mint there, and creating application namespaces is not
// configure's business.
func planCluster(ctx context.Context, kube kubernetes.Interface, p *policy.Policy, vaultNS string) (steps []clusterStep, unchanged int, err error) {
	cp := &clusterPlan{core: kube.CoreV1(), rbac: kube.RbacV1()}
	targets := targetNamespaces(p)
	if err := cp.vaultIdentity(ctx, vaultNS); err != nil {
		return nil, 0, err
	}
	if err := cp.tokenReview(ctx, vaultNS); err != nil {
		return nil, 0, err
	}
	if err := cp.scopeRoles(ctx, p); err != nil {
		return nil, 0, err
	}
	if err := cp.targetRights(ctx, targets, vaultNS); err != nil {
		return nil, 0, err
	}
	if err := cp.pruneRights(ctx, targets); err != nil {
		return nil, 0, err
	}
	return cp.steps, cp.unchanged, nil
}

// clusterPlan accumulates planCluster's steps and its count of objects already as desired, so that each
// group of objects is planned by a method of its own.
type clusterPlan struct {
	core      corev1client.CoreV1Interface
	rbac      rbacv1client.RbacV1Interface
	steps     []clusterStep
	unchanged int
}

func (cp *clusterPlan) add(action Action, kind, name string, apply func(context.Context) error) {
	cp.steps = append(cp.steps, clusterStep{Change: Change{Action: action, Kind: kind, Name: name}, apply: apply})
}

// vaultIdentity plans Vault's namespace, ServiceAccount and long-lived token.
func (cp *clusterPlan) vaultIdentity(ctx context.Context, vaultNS string) error {
	core := cp.core
	if _, err := core.Namespaces().Get(ctx, vaultNS, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		cp.add(ActionCreate, "namespace", vaultNS, func(ctx context.Context) error {
			_, err := core.Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: managedMeta("", vaultNS)}, metav1.CreateOptions{})
			return err
		})
	} else if err != nil {
		return fmt.Errorf("get namespace %s: %w", vaultNS, err)
	} else {
		cp.unchanged++
	}
	sa := &corev1.ServiceAccount{ObjectMeta: managedMeta(vaultNS, VaultServiceAccount)}
	if _, err := core.ServiceAccounts(vaultNS).Get(ctx, VaultServiceAccount, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		cp.add(ActionCreate, "service account", vaultNS+"/"+VaultServiceAccount, func(ctx context.Context) error {
			_, err := core.ServiceAccounts(vaultNS).Create(ctx, sa, metav1.CreateOptions{})
			return err
		})
	} else if err != nil {
		return fmt.Errorf("get service account %s/%s: %w", vaultNS, VaultServiceAccount, err)
	} else {
		cp.unchanged++
	}
	secret := &corev1.Secret{
		ObjectMeta: managedMeta(vaultNS, VaultTokenSecret),
		Type:       corev1.SecretTypeServiceAccountToken,
	}
	secret.Annotations = map[string]string{corev1.ServiceAccountNameKey: VaultServiceAccount}
	createSecret := func(ctx context.Context) error {
		_, err := core.Secrets(vaultNS).Create(ctx, secret, metav1.CreateOptions{})
		return err
	}
	switch cur, err := core.Secrets(vaultNS).Get(ctx, VaultTokenSecret, metav1.GetOptions{}); {
	case apierrors.IsNotFound(err):
		cp.add(ActionCreate, "secret", vaultNS+"/"+VaultTokenSecret, createSecret)
	case err != nil:
		return fmt.Errorf("get secret %s/%s: %w", vaultNS, VaultTokenSecret, err)
	case cur.Type != secret.Type || cur.Annotations[corev1.ServiceAccountNameKey] != VaultServiceAccount:
		// A Secret's type is immutable: replace it.
		cp.add(ActionUpdate, "secret", vaultNS+"/"+VaultTokenSecret, func(ctx context.Context) error {
			if err := deleteIfExists(core.Secrets(vaultNS).Delete(ctx, VaultTokenSecret, metav1.DeleteOptions{})); err != nil {
				return err
			}
			return createSecret(ctx)
		})
	default:
		cp.unchanged++
	}
	return nil
}

// tokenReview plans the rights the Kubernetes auth method needs: it reviews every sandbox login's token
// with the API server (TokenReview), as Vault's ServiceAccount, so a ClusterRole allows exactly that and a
// binding grants it.
func (cp *clusterPlan) tokenReview(ctx context.Context, vaultNS string) error {
	rbac := cp.rbac
	if err := cp.clusterRole(ctx, tokenReviewClusterRole()); err != nil {
		return err
	}
	crb := tokenReviewClusterRoleBinding(vaultNS)
	createCRB := func(ctx context.Context) error {
		_, err := rbac.ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{})
		return err
	}
	switch cur, err := rbac.ClusterRoleBindings().Get(ctx, tokenReviewName, metav1.GetOptions{}); {
	case apierrors.IsNotFound(err):
		cp.add(ActionCreate, "cluster role binding", tokenReviewName, createCRB)
	case err != nil:
		return fmt.Errorf("get cluster role binding %s: %w", tokenReviewName, err)
	case cur.RoleRef != crb.RoleRef || !equality.Semantic.DeepEqual(cur.Subjects, crb.Subjects) || !hasLabels(cur.Labels, crb.Labels):
		// roleRef is immutable (an older release bound system:auth-delegator here): replace the binding.
		cp.add(ActionUpdate, "cluster role binding", tokenReviewName, func(ctx context.Context) error {
			if err := deleteIfExists(rbac.ClusterRoleBindings().Delete(ctx, tokenReviewName, metav1.DeleteOptions{})); err != nil {
				return err
			}
			return createCRB(ctx)
		})
	default:
		cp.unchanged++
	}
	return nil
}

// clusterRole plans one ClusterRole of ours: created, or put back to exactly its rules (without an
// aggregation rule, which would let other ClusterRoles widen it) and labels.
func (cp *clusterPlan) clusterRole(ctx context.Context, want *rbacv1.ClusterRole) error {
	rbac := cp.rbac
	switch cur, err := rbac.ClusterRoles().Get(ctx, want.Name, metav1.GetOptions{}); {
	case apierrors.IsNotFound(err):
		cp.add(ActionCreate, "cluster role", want.Name, func(ctx context.Context) error {
			_, err := rbac.ClusterRoles().Create(ctx, want, metav1.CreateOptions{})
			return err
		})
	case err != nil:
		return fmt.Errorf("get cluster role %s: %w", want.Name, err)
	case !equality.Semantic.DeepEqual(cur.Rules, want.Rules) || cur.AggregationRule != nil || !hasLabels(cur.Labels, want.Labels):
		cur = cur.DeepCopy()
		cur.Rules, cur.AggregationRule = want.Rules, nil
		cur.Labels = withLabels(cur.Labels, want.Labels)
		cp.add(ActionUpdate, "cluster role", want.Name, func(ctx context.Context) error {
			_, err := rbac.ClusterRoles().Update(ctx, cur, metav1.UpdateOptions{})
			return err
		})
	default:
		cp.unchanged++
	}
	return nil
}

// scopeRoles plans one ClusterRole per scope that some tool uses, holding the scope's rules exactly (a
// widened one is put back), and deletes those of scopes no tool uses any more.
func (cp *clusterPlan) scopeRoles(ctx context.Context, p *policy.Policy) error {
	want := map[string]bool{}
	for i := range p.Spec.Scopes {
		s := &p.Spec.Scopes[i]
		if len(scopeNamespaces(p, s.Name)) == 0 {
			continue
		}
		cr := scopeClusterRole(s)
		want[cr.Name] = true
		if err := cp.clusterRole(ctx, cr); err != nil {
			return err
		}
	}
	rbac := cp.rbac
	sel := labels.SelectorFromSet(managedLabels()).String() + "," + LabelScope
	old, err := rbac.ClusterRoles().List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return fmt.Errorf("list cluster roles: %w", err)
	}
	for _, cr := range old.Items {
		if want[cr.Name] || !strings.HasPrefix(cr.Name, policy.VaultPrefix+"scope-") {
			continue
		}
		name := cr.Name
		cp.add(ActionDelete, "cluster role", name, func(ctx context.Context) error {
			return deleteIfExists(rbac.ClusterRoles().Delete(ctx, name, metav1.DeleteOptions{}))
		})
	}
	return nil
}

// targetRights plans a Role and RoleBinding per target namespace. It checks every namespace before
// failing, so that the error names all the missing ones at once.
func (cp *clusterPlan) targetRights(ctx context.Context, targets map[string][]*policy.Scope, vaultNS string) error {
	var missing []string
	for _, ns := range slices.Sorted(maps.Keys(targets)) {
		if _, err := cp.core.Namespaces().Get(ctx, ns, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			missing = append(missing, ns)
			continue
		} else if err != nil {
			return fmt.Errorf("get namespace %s: %w", ns, err)
		}
		if err := cp.namespaceRole(ctx, ns, targets[ns]); err != nil {
			return err
		}
		if err := cp.namespaceRoleBinding(ctx, ns, vaultNS); err != nil {
			return err
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s (the policy's tools target them; create them, then run configure again)",
			ErrNamespaceMissing, strings.Join(missing, ", "))
	}
	return nil
}

// namespaceRole plans Vault's Role in one target namespace.
func (cp *clusterPlan) namespaceRole(ctx context.Context, ns string, scopes []*policy.Scope) error {
	rbac := cp.rbac
	role := vaultRole(ns, scopes)
	switch cur, err := rbac.Roles(ns).Get(ctx, vaultRBACName, metav1.GetOptions{}); {
	case apierrors.IsNotFound(err):
		cp.add(ActionCreate, "role", ns+"/"+vaultRBACName, func(ctx context.Context) error {
			_, err := rbac.Roles(ns).Create(ctx, role, metav1.CreateOptions{})
			return err
		})
	case err != nil:
		return fmt.Errorf("get role %s/%s: %w", ns, vaultRBACName, err)
	case !equality.Semantic.DeepEqual(cur.Rules, role.Rules) || !hasLabels(cur.Labels, role.Labels):
		cur = cur.DeepCopy()
		cur.Rules = role.Rules
		cur.Labels = withLabels(cur.Labels, role.Labels)
		cp.add(ActionUpdate, "role", ns+"/"+vaultRBACName, func(ctx context.Context) error {
			_, err := rbac.Roles(ns).Update(ctx, cur, metav1.UpdateOptions{})
			return err
		})
	default:
		cp.unchanged++
	}
	return nil
}

// namespaceRoleBinding plans the binding of Vault's Role to its ServiceAccount in one target namespace.
func (cp *clusterPlan) namespaceRoleBinding(ctx context.Context, ns, vaultNS string) error {
	rbac := cp.rbac
	rb := vaultRoleBinding(ns, vaultNS)
	createRB := func(ctx context.Context) error {
		_, err := rbac.RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{})
		return err
	}
	switch cur, err := rbac.RoleBindings(ns).Get(ctx, vaultRBACName, metav1.GetOptions{}); {
	case apierrors.IsNotFound(err):
		cp.add(ActionCreate, "role binding", ns+"/"+vaultRBACName, createRB)
	case err != nil:
		return fmt.Errorf("get role binding %s/%s: %w", ns, vaultRBACName, err)
	case cur.RoleRef != rb.RoleRef || !equality.Semantic.DeepEqual(cur.Subjects, rb.Subjects) || !hasLabels(cur.Labels, rb.Labels):
		cp.add(ActionUpdate, "role binding", ns+"/"+vaultRBACName, func(ctx context.Context) error {
			if err := deleteIfExists(rbac.RoleBindings(ns).Delete(ctx, vaultRBACName, metav1.DeleteOptions{})); err != nil {
				return err
			}
			return createRB(ctx)
		})
	default:
		cp.unchanged++
	}
	return nil
}

// pruneRights plans the removal of the rights in namespaces no tool targets any more.
func (cp *clusterPlan) pruneRights(ctx context.Context, targets map[string][]*policy.Scope) error {
	rbac := cp.rbac
	sel := labels.SelectorFromSet(managedLabels()).String()
	roles, err := rbac.Roles(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return fmt.Errorf("list roles: %w", err)
	}
	for _, r := range roles.Items {
		if _, ok := targets[r.Namespace]; ok || r.Name != vaultRBACName {
			continue
		}
		ns := r.Namespace
		cp.add(ActionDelete, "role", ns+"/"+r.Name, func(ctx context.Context) error {
			return deleteIfExists(rbac.Roles(ns).Delete(ctx, vaultRBACName, metav1.DeleteOptions{}))
		})
	}
	bindings, err := rbac.RoleBindings(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return fmt.Errorf("list role bindings: %w", err)
	}
	for _, b := range bindings.Items {
		if _, ok := targets[b.Namespace]; ok || b.Name != vaultRBACName {
			continue
		}
		ns := b.Namespace
		cp.add(ActionDelete, "role binding", ns+"/"+b.Name, func(ctx context.Context) error {
			return deleteIfExists(rbac.RoleBindings(ns).Delete(ctx, vaultRBACName, metav1.DeleteOptions{}))
		})
	}
	return nil
}

// reviewerJWT returns the token the token controller put into Vault's Secret, waiting up to timeout for
// it (a new Secret is filled within a second or so). A zero timeout reads once.
func reviewerJWT(ctx context.Context, kube kubernetes.Interface, vaultNS string, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	for {
		s, err := kube.CoreV1().Secrets(vaultNS).Get(ctx, VaultTokenSecret, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return "", fmt.Errorf("get secret %s/%s: %w", vaultNS, VaultTokenSecret, err)
		}
		if err == nil && len(s.Data[corev1.ServiceAccountTokenKey]) > 0 {
			return string(s.Data[corev1.ServiceAccountTokenKey]), nil
		}
		if !time.Now().Before(deadline) {
			return "", fmt.Errorf("%w: %s/%s has no token after %s; is kube-controller-manager (its token controller) running?",
				ErrReviewerTokenMissing, vaultNS, VaultTokenSecret, timeout)
		}
		select {
		case <-ctx.Done():
			return "", context.Cause(ctx)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func deleteIfExists(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

func withLabels(have, want map[string]string) map[string]string {
	out := maps.Clone(have)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, want)
	return out
}
