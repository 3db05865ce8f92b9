package broker

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"

	"k8s.io/client-go/kubernetes/fake"
)

// namespaceRecorder sits in front of a Vault and records the X-Vault-Namespace header of every request
// (nil when a request has none), the way Vault Enterprise and HCP Vault read it.
type namespaceRecorder struct {
	mu   sync.Mutex
	seen []*string
}

func recordNamespaces(t *testing.T, upstream string) (*namespaceRecorder, string) {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	rec := &namespaceRecorder{}
	proxy := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ns *string
		if v := r.Header.Values("X-Vault-Namespace"); len(v) > 0 {
			ns = &v[0]
		}
		rec.mu.Lock()
		rec.seen = append(rec.seen, ns)
		rec.mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return rec, srv.URL
}

// all checks that there was at least one request and that every one carried want (nil: no header).
func (r *namespaceRecorder) all(t *testing.T, want *string) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.seen) == 0 {
		t.Fatal("no request reached Vault")
	}
	for i, got := range r.seen {
		switch {
		case want == nil && got != nil:
			t.Errorf("request %d carries X-Vault-Namespace %q, want none", i, *got)
		case want != nil && (got == nil || *got != *want):
			t.Errorf("request %d: X-Vault-Namespace %v, want %q", i, got, *want)
		}
	}
}

// TestAgentVaultNamespace: an agent configured with a Vault namespace logs in, mints and revokes in it; one
// configured without sends no namespace, even when $VAULT_NAMESPACE is set in its environment.
func TestAgentVaultNamespace(t *testing.T) {
	t.Setenv("VAULT_NAMESPACE", "from-the-environment")
	for _, ns := range []string{"admin/team-a", ""} {
		_, srv := newFakeVault(t)
		rec, addr := recordNamespaces(t, srv.URL)
		cfg, _ := agentFixture(t, addr)
		cfg.VaultNamespace = ns
		a := mustAgent(t, cfg)
		if _, err := a.Issue(context.Background()); err != nil {
			t.Fatalf("namespace %q: issue: %v", ns, err)
		}
		if err := a.Revoke(context.Background()); err != nil {
			t.Fatalf("namespace %q: revoke: %v", ns, err)
		}
		if ns == "" {
			rec.all(t, nil)
		} else {
			rec.all(t, &ns)
		}
	}
}

// TestConfigureVaultNamespace: configure makes its requests in the Vault Enterprise namespace it is given
// (here its first, the token check, which the fake Vault refuses so that nothing else happens), and in
// none when given none, whatever $VAULT_NAMESPACE says.
func TestConfigureVaultNamespace(t *testing.T) {
	t.Setenv("VAULT_NAMESPACE", "from-the-environment")
	pol := testCompiled(t)
	for _, ns := range []string{"admin/team-a", ""} {
		vault := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			vaultReply(w, 403, map[string]any{"errors": []string{"permission denied"}})
		}))
		t.Cleanup(vault.Close)
		rec, addr := recordNamespaces(t, vault.URL)
		_, err := Configure(context.Background(), ConfigureConfig{Policy: pol, Kube: fake.NewClientset(),
			KubernetesHost: "https://api:6443", KubernetesCA: []byte("CA PEM"), VaultAddr: addr, VaultEnterpriseNamespace: ns}, "hvs.token")
		if !errors.Is(err, ErrTokenRefused) {
			t.Fatalf("namespace %q: %v, want ErrTokenRefused", ns, err)
		}
		if ns == "" {
			rec.all(t, nil)
		} else {
			rec.all(t, &ns)
		}
	}
}
