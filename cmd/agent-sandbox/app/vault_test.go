package app

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestVaultConfigureValidate(t *testing.T) {
	o := &vaultConfigureOptions{getenv: func(string) string { return "" }}
	o.Complete()
	err := o.Validate()
	if err == nil || !strings.Contains(err.Error(), "--vault-addr or VAULT_ADDR") || !strings.Contains(err.Error(), "--vault-token-file or VAULT_TOKEN") {
		t.Errorf("Validate = %v", err)
	}
	env := map[string]string{"VAULT_ADDR": "http://v:8200", "VAULT_TOKEN": "t"}
	o = &vaultConfigureOptions{getenv: func(k string) string { return env[k] }}
	o.Complete()
	if err := o.Validate(); err != nil || o.VaultAddr != "http://v:8200" || o.PolicyFile != defaultPolicyFile || o.VaultNamespace != "agent-sandbox-system" {
		t.Errorf("from the environment: %v %+v", err, o)
	}
	env["VAULT_NAMESPACE"] = "admin/team-a"
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), `VAULT_NAMESPACE="admin/team-a" is set, but agent-sandbox does not support Vault namespaces yet`) {
		t.Errorf("VAULT_NAMESPACE: Validate = %v, want a refusal", err)
	}
	delete(env, "VAULT_NAMESPACE")
	if tok, err := o.vaultToken(); err != nil || tok != "t" {
		t.Errorf("token from env: %q %v", tok, err)
	}
	f := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(f, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o.VaultTokenFile = f
	if tok, err := o.vaultToken(); err != nil || tok != "from-file" {
		t.Errorf("token from file: %q %v", tok, err)
	}
	if err := os.WriteFile(f, []byte("two words"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := o.vaultToken(); err == nil {
		t.Error("a token with a space was accepted")
	}
}

// TestVaultConfigureUnreachable runs the whole command against a closed port: one line, no token.
func TestVaultConfigureUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := "http://" + l.Addr().String()
	l.Close()
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("hvs.SuperSecretAdminTokenValue0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: abc}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI(t, "vault", "configure", "--policy", "../../../broker/testdata/policy.yaml",
		"--vault-addr", addr, "--vault-token-file", tokenFile, "--kubeconfig", kubeconfig, "--kubernetes-ca-file", tokenFile)
	want := "error: vault at " + addr + " is unreachable: dial tcp " + strings.TrimPrefix(addr, "http://") + ": connect: connection refused\n"
	if code != 1 || stdout != "" || stderr != want {
		t.Errorf("code %d\nstdout %q\nstderr %q\nwant   %q", code, stdout, stderr, want)
	}
	if strings.Contains(stderr, "SuperSecret") {
		t.Error("the token was printed")
	}
}
