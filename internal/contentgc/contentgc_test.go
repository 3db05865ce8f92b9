package contentgc

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
)

// TestPrunerDeletesOnlyExpiredContent: workspaces and saved plans older than the approval request lifetime
// are deleted; younger ones, other ConfigMaps of the namespace and ConfigMaps of another namespace stay.
func TestPrunerDeletesOnlyExpiredContent(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	const ns, ttl = "agent-sandbox", 30 * time.Minute
	cm := func(namespace, name string, age time.Duration) client.Object {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name,
			CreationTimestamp: metav1.NewTime(now.Add(-age))}}
	}
	c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(
		cm(ns, contract.WorkspaceConfigMapPrefix+"old", time.Hour),
		cm(ns, contract.PlanConfigMapPrefix+"old", time.Hour),
		cm(ns, contract.WorkspaceConfigMapPrefix+"young", time.Minute),
		cm(ns, contract.PlanConfigMapPrefix+"young", time.Minute),
		cm(ns, "kube-root-ca.crt", 24*time.Hour),
		cm("elsewhere", contract.WorkspaceConfigMapPrefix+"old", time.Hour),
	).Build()
	p := &Pruner{Client: c, Namespace: ns, MaxAge: ttl, Now: func() time.Time { return now }}
	n, err := p.Prune(context.Background())
	if err != nil || n != 2 {
		t.Fatalf("Prune = %d, %v; want 2 deleted", n, err)
	}
	var left corev1.ConfigMapList
	if err := c.List(context.Background(), &left); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range left.Items {
		got = append(got, o.Namespace+"/"+o.Name)
	}
	slices.Sort(got)
	want := []string{"agent-sandbox/kube-root-ca.crt", "agent-sandbox/tfplan-young", "agent-sandbox/tfws-young", "elsewhere/tfws-old"}
	if !slices.Equal(got, want) {
		t.Errorf("left %v, want %v", got, want)
	}
}
