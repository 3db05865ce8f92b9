//go:build integration

package integration

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/test/harness"
)

// vaultTarget is what `agent-sandbox vault configure` works on in these tests: a real kube-apiserver with
// its controller manager, a real Vault dev server, and Vault's root token in a file, as an operator
// passes it with --vault-token-file.
type vaultTarget struct {
	api       *harness.APIServer
	vault     *harness.Vault
	tokenFile string
}

// startVaultTarget starts the API server (with the default controllers) and Vault, stopped when the test
// ends.
func startVaultTarget(t *testing.T) *vaultTarget {
	t.Helper()
	return newVaultTarget(t, harness.StartAPIServer(t, harness.WithControllerManager()))
}

// newVaultTarget starts Vault beside the running API server api, stopped when the test ends.
func newVaultTarget(t *testing.T, api *harness.APIServer) *vaultTarget {
	t.Helper()
	v := &vaultTarget{api: api, vault: harness.StartVault(t)}
	v.tokenFile = filepath.Join(t.TempDir(), "vault-token")
	if err := os.WriteFile(v.tokenFile, []byte(v.vault.RootToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return v
}

// configureArgs is the command line of `agent-sandbox vault configure` for the policy in policyFile against
// the target, with the extra flags after it.
func (v *vaultTarget) configureArgs(policyFile string, extra ...string) []string {
	return append([]string{"vault", "configure", "--policy", policyFile, "--vault-addr", v.vault.Addr,
		"--vault-token-file", v.tokenFile, "--kubeconfig", v.api.KubeconfigPath}, extra...)
}
