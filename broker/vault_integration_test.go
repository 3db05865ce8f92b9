//go:build integration

package broker

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/test/harness"
)

// TestReadVaultStateForeignPolicies runs against a real Vault dev server (on a free port, from
// $AGENT_SANDBOX_VAULT_BIN): ACL policies with agent-sandbox-* names are managed only when their text
// starts with the managed header, and a foreign one under a desired name stops the plan.
func TestReadVaultStateForeignPolicies(t *testing.T) {
	v := harness.StartVault(t)
	vc, err := newVaultClient(v.Addr, "", "")
	if err != nil {
		t.Fatal(err)
	}
	vc.SetToken(v.RootToken)
	ctx := context.Background()
	desired := testDesired(testPolicy(t))
	var wanted string
	for _, o := range desired {
		if o.kind == kindPolicy {
			wanted = o.name
			break
		}
	}
	for name, text := range map[string]string{
		"agent-sandbox-theirs": `path "secret/*" { capabilities = ["read"] }`,
		"agent-sandbox-gone":   managedPolicyHeader + "; changes are overwritten.\n" + `path "x/*" { capabilities = ["read"] }`,
		wanted:                 `path "secret/data/team/*" { capabilities = ["read"] }`,
	} {
		if err := vc.Sys().PutPolicyWithContext(ctx, name, text); err != nil {
			t.Fatal(err)
		}
	}
	st, err := readVaultState(ctx, vc, desired)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := st.managed[kindPolicy]["agent-sandbox-gone"]; !ok || len(st.managed[kindPolicy]) != 1 {
		t.Errorf("managed policies %v, want only agent-sandbox-gone", st.managed[kindPolicy])
	}
	slices.Sort(st.foreignPolicies)
	if want := []string{"agent-sandbox-theirs", wanted}; !slices.Equal(st.foreignPolicies, slices.Sorted(slices.Values(want))) {
		t.Errorf("foreign policies %v, want %v", st.foreignPolicies, want)
	}
	if _, _, err := planVault(desired, st); !errors.Is(err, ErrNotManaged) {
		t.Errorf("plan over a foreign policy under a desired name: %v, want ErrNotManaged", err)
	}
}
