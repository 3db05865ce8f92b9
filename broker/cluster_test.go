package broker

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/agent-sandbox/agent-sandbox/internal/policy"
)

// clusterWith is a fake cluster that has these namespaces and nothing else.
func clusterWith(names ...string) *fake.Clientset {
	objs := make([]runtime.Object, len(names))
	for i, n := range names {
		objs[i] = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}
	}
	return fake.NewClientset(objs...)
}

func applyCluster(t *testing.T, steps []clusterStep) []string {
	t.Helper()
	var out []string
	for _, s := range steps {
		if err := s.apply(context.Background()); err != nil {
			t.Fatalf("%s: %v", s.Line(false), err)
		}
		out = append(out, s.Line(false))
	}
	return out
}

func TestPlanClusterFromScratchThenIdempotent(t *testing.T) {
	ctx := context.Background()
	kube := clusterWith("team-a", "team-b", "kube-system")
	p := testPolicy(t)
	steps, unchanged, err := planCluster(ctx, kube, p, "vault-system")
	if err != nil {
		t.Fatal(err)
	}
	got := applyCluster(t, steps)
	want := []string{
		"created namespace vault-system",
		"created service account vault-system/vault",
		"created secret vault-system/vault-token",
		"created cluster role agent-sandbox-vault-tokenreview",
		"created cluster role binding agent-sandbox-vault-tokenreview",
		"created cluster role agent-sandbox-scope-pod-reader",
		"created cluster role agent-sandbox-scope-config-editor",
		"created role team-a/agent-sandbox-vault",
		"created role binding team-a/agent-sandbox-vault",
		"created role team-b/agent-sandbox-vault",
		"created role binding team-b/agent-sandbox-vault",
	}
	if !slices.Equal(got, want) || unchanged != 0 {
		t.Errorf("first run (unchanged %d):\n got %q\nwant %q", unchanged, got, want)
	}

	sec, err := kube.CoreV1().Secrets("vault-system").Get(ctx, VaultTokenSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sec.Type != corev1.SecretTypeServiceAccountToken || sec.Annotations[corev1.ServiceAccountNameKey] != VaultServiceAccount {
		t.Errorf("token secret: type %s annotations %v", sec.Type, sec.Annotations)
	}
	// The Kubernetes auth method reviews sandbox tokens as Vault: Vault may create TokenReviews, and
	// nothing else cluster-wide.
	cr, err := kube.RbacV1().ClusterRoles().Get(ctx, tokenReviewName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cr.Rules) != 1 || !slices.Equal(cr.Rules[0].APIGroups, []string{"authentication.k8s.io"}) ||
		!slices.Equal(cr.Rules[0].Resources, []string{"tokenreviews"}) || !slices.Equal(cr.Rules[0].Verbs, []string{"create"}) {
		t.Errorf("token review cluster role: %+v", cr.Rules)
	}
	crb, err := kube.RbacV1().ClusterRoleBindings().Get(ctx, tokenReviewName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if crb.RoleRef.Kind != "ClusterRole" || crb.RoleRef.Name != tokenReviewName || len(crb.Subjects) != 1 ||
		crb.Subjects[0].Namespace != "vault-system" || crb.Subjects[0].Name != VaultServiceAccount {
		t.Errorf("token review binding: %+v", crb)
	}
	rb, err := kube.RbacV1().RoleBindings("team-b").Get(ctx, vaultRBACName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rb.RoleRef.Kind != "Role" || rb.Subjects[0].Name != VaultServiceAccount {
		t.Errorf("role binding: %+v", rb)
	}
	// Nothing in a namespace no tool targets.
	if _, err := kube.RbacV1().Roles("kube-system").Get(ctx, vaultRBACName, metav1.GetOptions{}); err == nil {
		t.Error("vault got a role in kube-system")
	}

	steps, unchanged, err = planCluster(ctx, kube, p, "vault-system")
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 0 || unchanged != len(want) {
		t.Errorf("second run: steps %d, unchanged %d", len(steps), unchanged)
	}
}

func TestPlanClusterRepairsAndPrunes(t *testing.T) {
	ctx := context.Background()
	kube := clusterWith("team-a", "team-b", "old-team")
	p := testPolicy(t)
	steps, _, err := planCluster(ctx, kube, p, "vault-system")
	if err != nil {
		t.Fatal(err)
	}
	applyCluster(t, steps)

	// A widened Role, and leftovers in a namespace the policy no longer targets.
	role, _ := kube.RbacV1().Roles("team-a").Get(ctx, vaultRBACName, metav1.GetOptions{})
	role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}})
	if _, err := kube.RbacV1().Roles("team-a").Update(ctx, role, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	old := vaultRole("old-team", nil)
	if _, err := kube.RbacV1().Roles("old-team").Create(ctx, old, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.RbacV1().RoleBindings("old-team").Create(ctx, vaultRoleBinding("old-team", "vault-system"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The binding of a release before the JWT auth method: the same name, bound to system:auth-delegator.
	if err := kube.RbacV1().ClusterRoleBindings().Delete(ctx, tokenReviewName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	delegator := tokenReviewClusterRoleBinding("vault-system")
	delegator.RoleRef.Name = "system:auth-delegator"
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, delegator, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A widened scope ClusterRole, and one of a scope no tool uses any more.
	scope, _ := kube.RbacV1().ClusterRoles().Get(ctx, "agent-sandbox-scope-pod-reader", metav1.GetOptions{})
	scope.Rules = append(scope.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}})
	if _, err := kube.RbacV1().ClusterRoles().Update(ctx, scope, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	gone := scopeClusterRole(&policy.Scope{Name: "retired"})
	if _, err := kube.RbacV1().ClusterRoles().Create(ctx, gone, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A Role of the same name that someone else made is not ours to delete.
	foreign := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "old-team", Name: "other"}}
	if _, err := kube.RbacV1().Roles("old-team").Create(ctx, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	steps, _, err = planCluster(ctx, kube, p, "vault-system")
	if err != nil {
		t.Fatal(err)
	}
	got := applyCluster(t, steps)
	want := []string{
		"updated cluster role binding agent-sandbox-vault-tokenreview",
		"updated cluster role agent-sandbox-scope-pod-reader",
		"deleted cluster role agent-sandbox-scope-retired (no longer in the policy)",
		"updated role team-a/agent-sandbox-vault",
		"deleted role old-team/agent-sandbox-vault (no longer in the policy)",
		"deleted role binding old-team/agent-sandbox-vault (no longer in the policy)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("repair:\n got %q\nwant %q", got, want)
	}
	role, _ = kube.RbacV1().Roles("team-a").Get(ctx, vaultRBACName, metav1.GetOptions{})
	for _, r := range role.Rules {
		if slices.Contains(r.Resources, "secrets") {
			t.Error("the widened rule survived")
		}
	}
	scope, _ = kube.RbacV1().ClusterRoles().Get(ctx, "agent-sandbox-scope-pod-reader", metav1.GetOptions{})
	if !equality.Semantic.DeepEqual(scope.Rules, scopeClusterRole(findScope(p, "pod-reader")).Rules) {
		t.Errorf("the widened scope role was not put back: %+v", scope.Rules)
	}
	if _, err := kube.RbacV1().Roles("old-team").Get(ctx, "other", metav1.GetOptions{}); err != nil {
		t.Errorf("foreign role: %v", err)
	}
	if crb, err := kube.RbacV1().ClusterRoleBindings().Get(ctx, tokenReviewName, metav1.GetOptions{}); err != nil || crb.RoleRef.Name != tokenReviewName {
		t.Errorf("token review binding after repair: %+v, %v", crb, err)
	}
}

func TestPlanClusterMissingNamespace(t *testing.T) {
	ctx := context.Background()
	kube := clusterWith("team-a")
	_, _, err := planCluster(ctx, kube, testPolicy(t), "vault-system")
	if !errors.Is(err, ErrNamespaceMissing) {
		t.Fatalf("err = %v, want ErrNamespaceMissing", err)
	}
	if want := "team-b"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not name %s", err, want)
	}
}

func TestReviewerJWT(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset()
	if _, err := reviewerJWT(ctx, kube, "vault-system", 0); !errors.Is(err, ErrReviewerTokenMissing) {
		t.Errorf("no secret: err = %v", err)
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "vault-system", Name: VaultTokenSecret},
		Data: map[string][]byte{corev1.ServiceAccountTokenKey: []byte("the-token")}}
	if _, err := kube.CoreV1().Secrets("vault-system").Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := reviewerJWT(ctx, kube, "vault-system", 0)
	if err != nil || got != "the-token" {
		t.Errorf("reviewerJWT = %q, %v", got, err)
	}
}
