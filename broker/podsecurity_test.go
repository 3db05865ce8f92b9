package broker

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/agent-sandbox/agent-sandbox/internal/podsecurity"
)

// TestConfigureRefusesUnenforcedNamespace: with a target namespace that enforces no Pod Security level,
// Configure stops after Vault accepted the token and before any change, in the cluster or in Vault, with
// the refusal naming the namespace; AllowUnenforcedNamespaces turns the refusal into a warning and
// Configure goes on (here to the next stop: the test policy's other target namespace does not exist, which
// is said as a warning first). The test policy's tools target team-a and team-b.
func TestConfigureRefusesUnenforcedNamespace(t *testing.T) {
	pol := testCompiled(t)
	var mu sync.Mutex
	var paths []string
	vault := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.Method+" "+r.URL.Path)
		mu.Unlock()
		if r.URL.Path == "/v1/auth/token/lookup-self" {
			vaultReply(w, 200, map[string]any{"data": map[string]any{"policies": []string{"root"}}})
			return
		}
		vaultReply(w, 404, map[string]any{"errors": []string{"no handler"}})
	}))
	t.Cleanup(vault.Close)

	for _, c := range []struct {
		name    string
		teamA   map[string]string // labels of team-a; team-b does not exist
		allow   bool
		wantErr error
		warn    []string
	}{
		{name: "unlabelled, refused", wantErr: podsecurity.ErrUnenforced,
			warn: []string{"warning: namespace team-b, which the policy's tools target, does not exist yet"}},
		{name: "privileged, refused", teamA: map[string]string{podsecurity.EnforceLabel: "privileged"}, wantErr: podsecurity.ErrUnenforced},
		{name: "unlabelled, allowed", allow: true, wantErr: ErrNamespaceMissing,
			warn: []string{"WARNING: going on as told, but Pod Security is not enforced", "team-a: no pod-security.kubernetes.io/enforce label",
				"kubectl label ns team-a pod-security.kubernetes.io/enforce=baseline"}},
		{name: "baseline", teamA: map[string]string{podsecurity.EnforceLabel: "baseline"}, wantErr: ErrNamespaceMissing},
	} {
		t.Run(c.name, func(t *testing.T) {
			mu.Lock()
			paths = nil
			mu.Unlock()
			kube := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Labels: c.teamA}})
			var out, warnings bytes.Buffer
			_, err := Configure(context.Background(), ConfigureConfig{Policy: pol, Kube: kube, KubernetesHost: "https://api:6443",
				KubernetesCA: []byte("CA PEM"), VaultAddr: vault.URL, AllowUnenforcedNamespaces: c.allow, Out: &out, Warnings: &warnings}, "hvs.token")
			if !errors.Is(err, c.wantErr) {
				t.Fatalf("err %v, want %v", err, c.wantErr)
			}
			if errors.Is(c.wantErr, podsecurity.ErrUnenforced) && !strings.Contains(err.Error(), "team-a: ") {
				t.Errorf("the refusal does not name team-a: %v", err)
			}
			if c.wantErr != podsecurity.ErrUnenforced && errors.Is(err, podsecurity.ErrUnenforced) {
				t.Errorf("refused although it should have gone on: %v", err)
			}
			for _, w := range c.warn {
				if !strings.Contains(warnings.String(), w) {
					t.Errorf("warnings lack %q:\n%s", w, warnings.String())
				}
			}
			if !c.allow && strings.Contains(warnings.String(), "WARNING") {
				t.Errorf("a warning in place of the refusal without being told:\n%s", warnings.String())
			}
			// Nothing was changed: the cluster was only read, Vault was only asked about the token.
			for _, a := range kube.Actions() {
				if a.GetVerb() != "get" && a.GetVerb() != "list" {
					t.Errorf("cluster changed: %s %s", a.GetVerb(), a.GetResource().Resource)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(paths) != 1 || paths[0] != "GET /v1/auth/token/lookup-self" {
				t.Errorf("Vault requests %q, want only the token lookup", paths)
			}
			if out.Len() != 0 {
				t.Errorf("changes printed: %s", out.String())
			}
		})
	}
}
