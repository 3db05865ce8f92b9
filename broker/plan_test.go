package broker

import (
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// vaultEcho turns a desired object's data into what Vault's API returns for it: numbers as json.Number,
// lists as sorted []any, maps as map[string]any, secret fields left out.
func vaultEcho(o *vaultObject) map[string]any {
	out := map[string]any{}
	for k, v := range o.data {
		if slices.Contains(o.secret, k) {
			continue
		}
		switch t := v.(type) {
		case int64:
			out[k] = json.Number(strconv.FormatInt(t, 10))
		case []string:
			s := slices.Sorted(slices.Values(t))
			l := make([]any, len(s))
			for i := range s {
				l[i] = s[i]
			}
			out[k] = l
		case map[string]string:
			m := map[string]any{}
			for mk, mv := range t {
				m[mk] = mv
			}
			out[k] = m
		default:
			out[k] = v
		}
	}
	return out
}

// stateOf is a Vault that already holds exactly the desired objects.
func stateOf(desired []vaultObject) *vaultState {
	st := &vaultState{
		authMounts:    map[string]mountInfo{},
		secretsMounts: map[string]mountInfo{},
		objects:       map[string]map[string]any{},
		managed:       map[vaultKind]map[string]string{},
	}
	for i := range desired {
		o := &desired[i]
		switch o.kind {
		case kindAuthMount:
			st.authMounts[o.path] = mountInfo{Type: authMountType, Description: o.data["description"].(string)}
		case kindSecretsMount:
			st.secretsMounts[o.path] = mountInfo{Type: secretsMountType, Description: o.data["description"].(string)}
		default:
			st.objects[objectKey(o.kind, o.name)] = vaultEcho(o)
		}
		if slices.Contains(managedKinds, o.kind) {
			if st.managed[o.kind] == nil {
				st.managed[o.kind] = map[string]string{}
			}
			st.managed[o.kind][o.name] = o.path
		}
	}
	return st
}

func lines(steps []vaultStep) []string {
	var out []string
	for _, s := range steps {
		out = append(out, s.Line(false))
	}
	return out
}

func TestPlanVaultEmpty(t *testing.T) {
	desired := testDesired(testPolicy(t))
	steps, unchanged, err := planVault(desired, stateOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	if unchanged != 0 || len(steps) != len(desired) {
		t.Fatalf("steps %d, unchanged %d, want %d creations", len(steps), unchanged, len(desired))
	}
	for i, s := range steps {
		if s.Action != ActionCreate || s.obj != &desired[i] {
			t.Errorf("step %d: %s", i, s.Line(false))
		}
	}
	if got := steps[len(steps)-1].Line(false); got != "created secrets role agent-sandbox-config-editor" {
		t.Errorf("last line %q", got)
	}
}

func TestPlanVaultUnchanged(t *testing.T) {
	desired := testDesired(testPolicy(t))
	steps, unchanged, err := planVault(desired, stateOf(desired))
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 0 || unchanged != len(desired) {
		t.Errorf("a Vault that holds the policy: steps %q, unchanged %d of %d", lines(steps), unchanged, len(desired))
	}
}

func TestPlanVaultChanges(t *testing.T) {
	p := testPolicy(t)
	desired := testDesired(p)
	st := stateOf(desired)

	// Someone widened a role's namespaces and shortened an auth role's TTL by hand.
	st.objects[objectKey(kindSecretsRole, "agent-sandbox-pod-reader")]["allowed_kubernetes_namespaces"] = []any{"team-a", "team-b", "kube-system"}
	st.objects[objectKey(kindAuthRole, "agent-sandbox-get-pods")]["token_ttl"] = json.Number("5")
	// Leftovers of a removed tool and scope, and objects that are not ours.
	st.managed[kindAuthRole]["agent-sandbox-old-tool"] = "auth/k8s-auth/role/agent-sandbox-old-tool"
	st.managed[kindPolicy]["agent-sandbox-tool-old-tool"] = "sys/policies/acl/agent-sandbox-tool-old-tool"
	st.managed[kindSecretsRole]["agent-sandbox-old-scope"] = "k8s-creds/roles/agent-sandbox-old-scope"
	st.managed[kindPolicy]["someone-elses"] = "sys/policies/acl/someone-elses"
	// A new reviewer token: Vault shows nothing of it but the fingerprint on the mount no longer matches.
	st.secretsMounts["k8s-creds"] = mountInfo{Type: secretsMountType, Description: describeMount(secretsMountDescription, "0123456789abcdef")}

	steps, unchanged, err := planVault(desired, st)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"updated config k8s-creds/config",
		"updated auth role agent-sandbox-get-pods",
		"updated secrets role agent-sandbox-pod-reader",
		"deleted auth role agent-sandbox-old-tool (no longer in the policy)",
		"deleted secrets role agent-sandbox-old-scope (no longer in the policy)",
		"deleted policy agent-sandbox-tool-old-tool (no longer in the policy)",
	}
	if got := lines(steps); !slices.Equal(got, want) {
		t.Errorf("plan:\n got %q\nwant %q", got, want)
	}
	if unchanged != len(desired)-3 {
		t.Errorf("unchanged = %d, want %d", unchanged, len(desired)-3)
	}
	for _, s := range steps {
		if s.Action == ActionDelete && s.deletePath == "" {
			t.Errorf("%s has no path", s.Line(false))
		}
	}
}

// TestPlanVaultWideningFields: fields configure does not write used to be compared with nothing, so a
// namespace selector or a token period put on a role by hand read as "unchanged" (found in review,
// 2026-12-06). Those it knows it writes empty, and so updates; one it does not know stops the plan.
func TestPlanVaultWideningFields(t *testing.T) {
	desired := testDesired(testPolicy(t))
	for _, tt := range []struct {
		name        string
		kind        vaultKind
		role, field string
		value       any
		want        string // the plan's one step, or the error
	}{
		{"auth namespace selector", kindAuthRole, "agent-sandbox-get-pods", "bound_service_account_namespace_selector", `{"matchLabels":{}}`, "updated auth role agent-sandbox-get-pods"},
		{"auth token period", kindAuthRole, "agent-sandbox-get-pods", "token_period", json.Number("86400"), "updated auth role agent-sandbox-get-pods"},
		{"auth explicit max TTL", kindAuthRole, "agent-sandbox-get-pods", "token_explicit_max_ttl", json.Number("86400"), "updated auth role agent-sandbox-get-pods"},
		{"secrets namespace selector", kindSecretsRole, "agent-sandbox-pod-reader", "allowed_kubernetes_namespace_selector", `{"matchLabels":{}}`, "updated secrets role agent-sandbox-pod-reader"},
		{"a field configure does not know", kindAuthRole, "agent-sandbox-get-pods", "bound_service_account_everything", true, "has bound_service_account_everything = true"},
		{"a deprecated mirror of another value", kindAuthRole, "agent-sandbox-get-pods", "policies", []any{"default"}, "has policies = [default]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := stateOf(desired)
			st.objects[objectKey(tt.kind, tt.role)][tt.field] = tt.value
			steps, _, err := planVault(desired, st)
			switch {
			case err != nil:
				if !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrNotManaged) {
					t.Errorf("error %v, want one with %q (ErrNotManaged)", err, tt.want)
				}
			case !slices.Equal(lines(steps), []string{tt.want}):
				t.Errorf("plan %q, want %q", lines(steps), tt.want)
			}
		})
	}
	// Fields Vault returns empty, and the deprecated names of the fields it writes, are no change.
	st := stateOf(desired)
	role := st.objects[objectKey(kindAuthRole, "agent-sandbox-get-pods")]
	role["bound_service_account_namespace_selector"], role["token_bound_cidrs"], role["policies"] = "", []any{}, role["token_policies"]
	role["some_future_field"] = json.Number("0")
	st.objects[objectKey(kindSecretsRole, "agent-sandbox-pod-reader")]["name"] = "agent-sandbox-pod-reader" // the engine returns it
	if steps, _, err := planVault(desired, st); err != nil || len(steps) != 0 {
		t.Errorf("empty fields: plan %q, %v", lines(steps), err)
	}
}

func TestPlanVaultConfigWithoutRecordedToken(t *testing.T) {
	desired := testDesired(testPolicy(t))
	st := stateOf(desired)
	// A config written by an older configure: the mount records no fingerprint.
	st.secretsMounts["k8s-creds"] = mountInfo{Type: secretsMountType, Description: secretsMountDescription}
	// The auth method holds the same reviewer token, recorded on its own mount.
	st.authMounts["k8s-auth"] = mountInfo{Type: authMountType, Description: describeMount(authMountDescription, "0123456789abcdef")}
	steps, _, err := planVault(desired, st)
	if err != nil {
		t.Fatal(err)
	}
	if got := lines(steps); !slices.Equal(got, []string{"updated config auth/k8s-auth/config", "updated config k8s-creds/config"}) {
		t.Errorf("plan %q", got)
	}
}

func TestPlanVaultMountConflict(t *testing.T) {
	desired := testDesired(testPolicy(t))
	st := stateOf(desired)
	st.secretsMounts["k8s-creds"] = mountInfo{Type: "kv"}
	if _, _, err := planVault(desired, st); !errors.Is(err, ErrMountConflict) {
		t.Errorf("err = %v, want ErrMountConflict", err)
	}
	// A mount of the right type that agent-sandbox did not create is not adopted.
	st = stateOf(desired)
	st.authMounts["k8s-auth"] = mountInfo{Type: authMountType, Description: "the platform team's OIDC login"}
	if _, _, err := planVault(desired, st); !errors.Is(err, ErrMountConflict) || !strings.Contains(err.Error(), "not created by agent-sandbox") {
		t.Errorf("foreign mount: err = %v", err)
	}
}

// TestPlanVaultReplacesOwnJWTMount: an install upgraded from the release that logged sandboxes in with the
// JWT auth method has its own auth mount of type jwt at the policy's path. The plan replaces it (a mount's
// type cannot change in place) and writes its config and roles again; nothing under it is read, compared
// or pruned, since disabling the mount deletes all of it.
func TestPlanVaultReplacesOwnJWTMount(t *testing.T) {
	desired := testDesired(testPolicy(t))
	st := stateOf(desired)
	st.authMounts["k8s-auth"] = mountInfo{Type: "jwt", Description: authMountDescription}
	// What readVaultState leaves out for an auth mount of the wrong type: its config and roles.
	for _, o := range desired {
		if strings.HasPrefix(o.path, "auth/") {
			delete(st.objects, objectKey(o.kind, o.name))
		}
	}
	delete(st.managed, kindAuthRole)
	steps, unchanged, err := planVault(desired, st)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`replaced auth method auth/k8s-auth (it was a "jwt" mount, now "kubernetes"; tokens it issued are revoked)`,
		"created config auth/k8s-auth/config",
		"created auth role agent-sandbox-get-pods",
		"created auth role agent-sandbox-get-pods-again",
		"created auth role agent-sandbox-edit-config",
	}
	if got := lines(steps); !slices.Equal(got, want) {
		t.Errorf("plan:\n got %q\nwant %q", got, want)
	}
	if unchanged != len(desired)-len(want) {
		t.Errorf("unchanged %d, want %d", unchanged, len(desired)-len(want))
	}
	if steps[0].Line(true) != `would replace auth method auth/k8s-auth (it was a "jwt" mount, now "kubernetes"; tokens it issued are revoked)` {
		t.Errorf("dry run line %q", steps[0].Line(true))
	}
	// Somebody else's jwt mount at that path is still never touched.
	st.authMounts["k8s-auth"] = mountInfo{Type: "jwt", Description: "the platform team's OIDC login"}
	if _, _, err := planVault(desired, st); !errors.Is(err, ErrMountConflict) {
		t.Errorf("foreign jwt mount: err = %v, want ErrMountConflict", err)
	}
}

// TestPlanVaultForeignPolicy: an ACL policy under one of agent-sandbox's names that agent-sandbox did not
// write (no managed header) is neither overwritten nor, once the policy drops the tool, deleted; the plan
// fails naming it, so a dry run shows the refusal too.
func TestPlanVaultForeignPolicy(t *testing.T) {
	desired := testDesired(testPolicy(t))
	var pol *vaultObject
	for i := range desired {
		if desired[i].kind == kindPolicy {
			pol = &desired[i]
			break
		}
	}
	if pol == nil || !managedPolicy(pol.data["policy"].(string)) {
		t.Fatalf("the desired policies must carry the managed header: %+v", pol)
	}
	for _, text := range []string{`path "secret/*" { capabilities = ["read"] }`, "", "# managed by hand\n" + pol.data["policy"].(string)} {
		st := stateOf(desired)
		st.objects[objectKey(kindPolicy, pol.name)] = map[string]any{"policy": text}
		steps, _, err := planVault(desired, st)
		if !errors.Is(err, ErrNotManaged) || !strings.Contains(err.Error(), "policy "+pol.name+" exists and was not created by agent-sandbox") {
			t.Errorf("foreign policy %q: steps %q, err %v; want ErrNotManaged", text, lines(steps), err)
		}
	}
	// Our own policy with an outdated text is updated as before.
	st := stateOf(desired)
	st.objects[objectKey(kindPolicy, pol.name)] = map[string]any{"policy": managedPolicyHeader + "; old text"}
	if steps, _, err := planVault(desired, st); err != nil || !slices.Equal(lines(steps), []string{"updated policy " + pol.name}) {
		t.Errorf("own outdated policy: %q, %v", lines(steps), err)
	}
	// A foreign agent-sandbox-* policy the tools do not use is not in managed, so it is never pruned,
	// while an own one is.
	st = stateOf(desired)
	st.foreignPolicies = []string{"agent-sandbox-theirs"}
	st.managed[kindPolicy]["agent-sandbox-gone"] = "sys/policies/acl/agent-sandbox-gone"
	steps, _, err := planVault(desired, st)
	if err != nil || !slices.Equal(lines(steps), []string{"deleted policy agent-sandbox-gone (no longer in the policy)"}) {
		t.Errorf("prune: %q, %v", lines(steps), err)
	}
}

func TestChangeLine(t *testing.T) {
	for _, tc := range []struct {
		c      Change
		dryRun bool
		want   string
	}{
		{Change{Action: ActionCreate, Kind: "auth role", Name: "agent-sandbox-k8s-get-pod-status"}, false, "created auth role agent-sandbox-k8s-get-pod-status"},
		{Change{Action: ActionUpdate, Kind: "role", Name: "demo-app/agent-sandbox-vault"}, false, "updated role demo-app/agent-sandbox-vault"},
		{Change{Action: ActionDelete, Kind: "policy", Name: "agent-sandbox-tool-x"}, false, "deleted policy agent-sandbox-tool-x (no longer in the policy)"},
		{Change{Action: ActionCreate, Kind: "secrets engine", Name: "kubernetes"}, true, "would create secrets engine kubernetes"},
		{Change{Action: ActionDelete, Kind: "auth role", Name: "agent-sandbox-x"}, true, "would delete auth role agent-sandbox-x (no longer in the policy)"},
		{Change{Action: ActionReplace, Kind: "auth method", Name: "auth/x", Why: "it was a jwt mount"}, false, "replaced auth method auth/x (it was a jwt mount)"},
		{Change{Action: ActionReplace, Kind: "auth method", Name: "auth/x", Why: "it was a jwt mount"}, true, "would replace auth method auth/x (it was a jwt mount)"},
	} {
		if got := tc.c.Line(tc.dryRun); got != tc.want {
			t.Errorf("Line(%v) = %q, want %q", tc.dryRun, got, tc.want)
		}
	}
}

func TestSameValue(t *testing.T) {
	for _, tc := range []struct {
		a, b any
		same bool
	}{
		{int64(600), json.Number("600"), true},
		{int64(600), float64(600), true},
		{int64(600), json.Number("601"), false},
		{[]string{"b", "a"}, []any{"a", "b"}, true},
		{[]string{"a"}, []any{"a", "b"}, false},
		{true, true, true},
		{true, false, false},
		{map[string]string{"k": "v"}, map[string]any{"k": "v"}, true},
		{map[string]string{"k": "v"}, map[string]any{"k": "w"}, false},
		{"x", nil, false},
		{[]string{}, nil, true},
	} {
		if got := sameValue(tc.a, tc.b); got != tc.same {
			t.Errorf("sameValue(%#v, %#v) = %v", tc.a, tc.b, got)
		}
	}
}
