package cluster

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/cli"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
)

func TestVaultConfigureValidate(t *testing.T) {
	o := &vaultConfigureOptions{vaultAccess: vaultAccess{getenv: func(string) string { return "" }}}
	o.Complete()
	err := o.Validate()
	if err == nil || !strings.Contains(err.Error(), "--vault-addr or VAULT_ADDR") || !strings.Contains(err.Error(), "--vault-token-file or VAULT_TOKEN") {
		t.Errorf("Validate = %v", err)
	}
	env := map[string]string{"VAULT_ADDR": "http://v:8200", "VAULT_TOKEN": "t"}
	o = &vaultConfigureOptions{vaultAccess: vaultAccess{getenv: func(k string) string { return env[k] }}}
	o.Complete()
	if err := o.Validate(); err != nil || o.VaultAddr != "http://v:8200" || o.PolicyFile != defaultPolicyFile || o.VaultNamespace != "agent-sandbox-system" {
		t.Errorf("from the environment: %v %+v", err, o)
	}
	env["VAULT_NAMESPACE"] = "admin/team-a/"
	if err := o.Validate(); err != nil {
		t.Errorf("VAULT_NAMESPACE: Validate = %v", err)
	}
	env["VAULT_NAMESPACE"] = "admin team"
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), `VAULT_NAMESPACE="admin team" is not a Vault namespace path`) {
		t.Errorf("a bad VAULT_NAMESPACE: Validate = %v, want a refusal", err)
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
	code, stdout, stderr := testMain.Capture("vault", "configure", "--policy", "../../../../broker/testdata/policy.yaml",
		"--vault-addr", addr, "--vault-token-file", tokenFile, "--kubeconfig", "../testdata/unreachable.kubeconfig", "--kubernetes-ca-file", tokenFile)
	want := "error: vault at " + addr + " is unreachable: dial tcp " + strings.TrimPrefix(addr, "http://") + ": connect: connection refused\n"
	if code != 1 || stdout != "" || stderr != want {
		t.Errorf("code %d\nstdout %q\nstderr %q\nwant   %q", code, stdout, stderr, want)
	}
	if strings.Contains(stderr, "SuperSecret") {
		t.Error("the token was printed")
	}
}

// TestVaultConfigureNamespace: the Vault namespace comes from $VAULT_NAMESPACE, else from the policy; two
// different ones are refused, and one named only by the environment is pointed out on stderr.
func TestVaultConfigureNamespace(t *testing.T) {
	withNS, err := policy.Load(mustReadPolicyWith(t, "admin/team-a"))
	if err != nil {
		t.Fatal(err)
	}
	without, err := policy.Load(mustReadPolicyWith(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, env string
		pol       *policy.Compiled
		want      string
		wantErr   string
		wantNote  bool
	}{
		{"neither", "", without, "", "", false},
		{"policy only", "", withNS, "admin/team-a", "", false},
		{"environment only", "/admin/team-b/", without, "admin/team-b", "", true},
		{"both agree", "admin/team-a", withNS, "admin/team-a", "", false},
		{"both differ", "admin/team-b", withNS, "", `VAULT_NAMESPACE="admin/team-b" but the policy's spec.sandbox.credentialAgent.vaultNamespace is "admin/team-a"`, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var stderr strings.Builder
			o := &vaultAccess{streams: cli.IO{ErrOut: &stderr}, getenv: func(k string) string {
				if k == "VAULT_NAMESPACE" {
					return tt.env
				}
				return ""
			}}
			got, err := o.vaultNamespace(tt.pol)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("namespace %q, %v; want %q", got, err, tt.want)
			}
			if note := strings.Contains(stderr.String(), "--set vault.namespace="+tt.want); note != tt.wantNote {
				t.Errorf("stderr %q, want a note: %v", stderr.String(), tt.wantNote)
			}
		})
	}
}

// mustReadPolicyWith is the shipped policy with credentialAgent.vaultNamespace set to ns (none if empty).
func mustReadPolicyWith(t *testing.T, ns string) []byte {
	t.Helper()
	data, err := os.ReadFile("../../../../policy/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if ns == "" {
		return data
	}
	const anchor = "      vaultAudience: vault\n"
	if !strings.Contains(string(data), anchor) {
		t.Fatalf("the shipped policy has no %q line", anchor)
	}
	return []byte(strings.Replace(string(data), anchor, anchor+"      vaultNamespace: "+ns+"\n", 1))
}

// TestPodSecurityFlagOnBothCommands: `vault configure` and `preflight` take the same flag to go on past an
// unenforced target namespace, and their help says what is checked and how to fix it.
func TestPodSecurityFlagOnBothCommands(t *testing.T) {
	for _, args := range [][]string{{"vault", "configure", "--help"}, {"preflight", "--help"}} {
		code, stdout, _ := testMain.Capture(args...)
		if code != 0 {
			t.Fatalf("%v: exit %d", args, code)
		}
		for _, want := range []string{"--" + allowUnenforcedFlag, "pod-security.kubernetes.io/enforce", "kubectl label ns demo-app pod-security.kubernetes.io/enforce=baseline",
			"AdmissionConfiguration", "Pod Security protects it from what the tool"} {
			if !strings.Contains(stdout, want) {
				t.Errorf("%v does not mention %q", args, want)
			}
		}
	}
}

// TestPreflightCompleteTakesTheTargetNamespaces: with --policy, preflight checks the namespaces the
// policy's tools target.
func TestPreflightCompleteTakesTheTargetNamespaces(t *testing.T) {
	o := &PreflightOptions{Policy: "../../../../broker/testdata/policy.yaml"}
	if err := o.Complete(); err != nil {
		t.Fatal(err)
	}
	if strings.Join(o.namespaces, ",") != "team-a,team-b" {
		t.Errorf("namespaces %v, want team-a,team-b", o.namespaces)
	}
}

// TestVaultDisableHelp: the help says when to run disable, what turns logins back on, and that minted
// credentials live out their lease.
func TestVaultDisableHelp(t *testing.T) {
	code, stdout, _ := testMain.Capture("vault", "disable", "--help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"before `helm uninstall`", "`helm install`, then `agent-sandbox vault configure`", "lives out its lease",
		"--dry-run", "--policy", "--vault-addr", "--vault-token-file", "--vault-ca-file"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("vault disable --help does not mention %q", want)
		}
	}
	for _, unwanted := range []string{"--kubeconfig", "--" + allowUnenforcedFlag} {
		if strings.Contains(stdout, unwanted) {
			t.Errorf("vault disable takes %s: it must need neither the cluster nor the Pod Security check", unwanted)
		}
	}
}

// TestVaultDisableUnreachable runs the whole command against a closed port, without any kubeconfig: one
// line, no token.
func TestVaultDisableUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := "http://" + l.Addr().String()
	l.Close()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("hvs.SuperSecretAdminTokenValue0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "absent"))
	code, stdout, stderr := testMain.Capture("vault", "disable", "--policy", "../../../../broker/testdata/policy.yaml",
		"--vault-addr", addr, "--vault-token-file", tokenFile)
	want := "error: vault at " + addr + " is unreachable: dial tcp " + strings.TrimPrefix(addr, "http://") + ": connect: connection refused\n"
	if code != 1 || stdout != "" || stderr != want {
		t.Errorf("code %d\nstdout %q\nstderr %q\nwant   %q", code, stdout, stderr, want)
	}
	if strings.Contains(stderr, "SuperSecret") {
		t.Error("the token was printed")
	}
}
