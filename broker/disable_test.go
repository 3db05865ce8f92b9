package broker

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestPlanDisableDeletesEveryManagedObject: against a Vault configured from the policy, plus a managed role
// the policy no longer declares and somebody else's role and policy, disable deletes every managed login
// role first, then the secrets roles and our ACL policies, touches no mount or config and nothing foreign;
// against the result it plans nothing.
func TestPlanDisableDeletesEveryManagedObject(t *testing.T) {
	p := testPolicy(t)
	st := stateOf(testDesired(p))
	st.managed[kindAuthRole]["agent-sandbox-removed-tool"] = "auth/x/role/agent-sandbox-removed-tool"
	// Names without our prefix never reach managed (listManaged); a foreign agent-sandbox-* policy is kept aside.
	st.foreignPolicies = []string{"agent-sandbox-theirs"}

	steps, err := planDisable(disabledVault(p), st)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []vaultKind
	for _, s := range steps {
		if s.Action != ActionDelete || s.deletePath == "" {
			t.Errorf("step %q is not a deletion", s.Line(false))
		}
		if s.Name == "agent-sandbox-theirs" {
			t.Errorf("deletes a foreign policy: %q", s.Line(false))
		}
		kinds = append(kinds, vaultKind(s.Kind))
	}
	for kind, names := range st.managed {
		for name := range names {
			if !slices.ContainsFunc(steps, func(s vaultStep) bool { return s.Kind == string(kind) && s.Name == name }) {
				t.Errorf("%s %s is not deleted", kind, name)
			}
		}
	}
	// Logins are refused from the first change on.
	if len(kinds) == 0 || kinds[0] != kindAuthRole || slices.Index(kinds, kindPolicy) < slices.Index(kinds, kindAuthRole) {
		t.Errorf("order %v: login roles must go first", kinds)
	}
	got := lines(steps)
	for _, want := range []string{
		"deleted auth role agent-sandbox-get-pods (Vault refuses this tool's logins)",
		"deleted policy agent-sandbox-tool-get-pods (tokens already issued with it can no longer mint credentials)",
	} {
		if !slices.Contains(got, want) {
			t.Errorf("lines lack %q:\n%s", want, strings.Join(got, "\n"))
		}
	}

	// After the deletions: nothing left to do, and the missing mounts are not created.
	st.managed = map[vaultKind]map[string]string{}
	st.authMounts, st.secretsMounts = map[string]mountInfo{}, map[string]mountInfo{}
	if steps, err := planDisable(disabledVault(p), st); err != nil || len(steps) != 0 {
		t.Errorf("second plan: %q, %v; want nothing", lines(steps), err)
	}
}

// TestPlanDisableForeignMount: a mount agent-sandbox did not create at the policy's path stops disable as it
// stops configure, before any change: its roles are somebody else's.
func TestPlanDisableForeignMount(t *testing.T) {
	p := testPolicy(t)
	st := stateOf(testDesired(p))
	for path := range st.authMounts {
		st.authMounts[path] = mountInfo{Type: authMountType, Description: "theirs"}
	}
	if _, err := planDisable(disabledVault(p), st); !errors.Is(err, ErrMountConflict) {
		t.Errorf("err %v, want ErrMountConflict", err)
	}
}

// TestDisabledVaultLeavesThePolicyAlone: the desired state without tools is computed on a copy.
func TestDisabledVaultLeavesThePolicyAlone(t *testing.T) {
	p := testPolicy(t)
	n := len(p.Spec.Tools)
	objs := disabledVault(p)
	if len(p.Spec.Tools) != n || n == 0 {
		t.Errorf("the policy lost its tools: %d, had %d", len(p.Spec.Tools), n)
	}
	if len(objs) != 2 || objs[0].kind != kindAuthMount || objs[1].kind != kindSecretsMount {
		t.Errorf("disabled state: %+v, want the two mounts", objs)
	}
}
