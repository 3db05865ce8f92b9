package broker

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/internal/policy"
)

// Action is what a Change does.
type Action string

// The actions.
const (
	ActionCreate Action = "create"
	ActionUpdate Action = "update"
	ActionDelete Action = "delete"
	// ActionReplace disables a mount and enables it again with another plugin type: what Vault held under
	// it (config, roles, the tokens it issued) goes with it and is written again.
	ActionReplace Action = "replace"
)

// Change is one thing Configure creates, updates or deletes, in the cluster or in Vault.
type Change struct {
	Action Action
	// Kind and Name say what: "auth role" "agent-sandbox-k8s-get-pod-status", "role" "demo-app/agent-sandbox-vault".
	Kind string
	Name string
	// Why, when set, is printed after the change in parentheses.
	Why string
}

// Line is the change as Configure prints it: "created auth role X", or in a dry run "would create ...".
func (c Change) Line(dryRun bool) string {
	var s string
	if dryRun {
		s = fmt.Sprintf("would %s %s %s", c.Action, c.Kind, c.Name)
	} else {
		s = fmt.Sprintf("%sd %s %s", c.Action, c.Kind, c.Name) // create -> created, update -> updated
	}
	switch {
	case c.Why != "":
		s += " (" + c.Why + ")"
	case c.Action == ActionDelete:
		s += " (no longer in the policy)"
	}
	return s
}

func (c Change) String() string { return c.Line(false) }

// vaultState is what Vault holds of the objects Configure manages.
type vaultState struct {
	// authMounts and secretsMounts map a mount path (no slashes around it) to its type and description.
	authMounts    map[string]mountInfo
	secretsMounts map[string]mountInfo
	// objects maps kind/name to the data Vault returned for it; absent objects are missing.
	objects map[string]map[string]any
	// managed lists, per prunable kind, the existing names that start with policy.VaultPrefix, and the
	// path each is deleted at. An ACL policy is listed only if agent-sandbox wrote it (managedPolicy).
	managed map[vaultKind]map[string]string
	// foreignPolicies are ACL policies with an agent-sandbox-* name that agent-sandbox did not write:
	// never overwritten or deleted.
	foreignPolicies []string
}

type mountInfo struct {
	Type        string
	Description string
}

func objectKey(kind vaultKind, name string) string { return string(kind) + "/" + name }

// vaultStep is one change to Vault: write obj, or delete the object at deletePath.
type vaultStep struct {
	Change
	obj        *vaultObject
	deletePath string
}

// planVault compares the desired objects with Vault's state. It returns the steps in the order they must
// run (writes in desired order, then deletions: roles before the policies they name) and the number of
// objects already as desired.
func planVault(desired []vaultObject, cur *vaultState) (steps []vaultStep, unchanged int, err error) {
	wanted := map[vaultKind]map[string]bool{}
	for i := range desired {
		o := &desired[i]
		if wanted[o.kind] == nil {
			wanted[o.kind] = map[string]bool{}
		}
		wanted[o.kind][o.name] = true
		action, why, err := compareObject(o, cur)
		if err != nil {
			return nil, 0, err
		}
		if action == "" {
			unchanged++
			continue
		}
		steps = append(steps, vaultStep{Change: Change{Action: action, Kind: string(o.kind), Name: o.name, Why: why}, obj: o})
	}
	for _, kind := range managedKinds {
		names := make([]string, 0, len(cur.managed[kind]))
		for name := range cur.managed[kind] {
			if strings.HasPrefix(name, policy.VaultPrefix) && !wanted[kind][name] {
				names = append(names, name)
			}
		}
		slices.Sort(names)
		for _, name := range names {
			steps = append(steps, vaultStep{Change: Change{Action: ActionDelete, Kind: string(kind), Name: name}, deletePath: cur.managed[kind][name]})
		}
	}
	return steps, unchanged, nil
}

// compareObject returns the action that makes Vault hold o, or "" when it already does, and why when the
// action alone does not say it.
func compareObject(o *vaultObject, cur *vaultState) (Action, string, error) {
	switch o.kind {
	case kindAuthMount, kindSecretsMount:
		mounts := cur.authMounts
		if o.kind == kindSecretsMount {
			mounts = cur.secretsMounts
		}
		m, ok := mounts[o.path]
		switch {
		case !ok:
			return ActionCreate, "", nil
		case !strings.HasPrefix(m.Description, "agent-sandbox:"):
			// Never adopt a mount somebody else made: its roles and config are theirs.
			if m.Type != o.data["type"] {
				return "", "", fmt.Errorf("%s %s is a %q mount, not %q: %w", o.kind, o.name, m.Type, o.data["type"], ErrMountConflict)
			}
			return "", "", fmt.Errorf("%s %s exists and was not created by agent-sandbox; give agent-sandbox its own mount path in the policy (spec.sandbox.credentialAgent.vaultAuthMount / vaultSecretsMount): %w", o.kind, o.name, ErrMountConflict)
		case m.Type != o.data["type"]:
			// Our own mount of another plugin type: the JWT auth method of a release before the switch
			// to the Kubernetes auth method. A mount's type cannot be changed in place.
			return ActionReplace, fmt.Sprintf("it was a %q mount, now %q; tokens it issued are revoked", m.Type, o.data["type"]), nil
		}
		// The description (and its token fingerprint) is rewritten together with the config.
		return "", "", nil
	}
	got, ok := cur.objects[objectKey(o.kind, o.name)]
	if !ok {
		return ActionCreate, "", nil
	}
	if text, _ := got["policy"].(string); o.kind == kindPolicy && !managedPolicy(text) {
		// Somebody else's policy under our name: overwriting it would change what their tokens may do.
		return "", "", fmt.Errorf("%s %s exists and was not created by agent-sandbox (its text does not start with %s); rename or delete it, agent-sandbox will not overwrite it: %w", o.kind, o.name, managedPolicyHeader, ErrNotManaged)
	}
	if k, ok := unmanagedField(o, got); ok {
		return "", "", fmt.Errorf("%s %s has %s = %v, a field agent-sandbox does not write and which may widen who can log in or what a credential allows; clear it in Vault (vault write %s %s=<empty>) and run configure again: %w",
			o.kind, o.name, k, got[k], o.path, k, ErrNotManaged)
	}
	for k, want := range o.data {
		if slices.Contains(o.secret, k) {
			continue
		}
		if !sameValue(want, got[k]) {
			return ActionUpdate, "", nil
		}
	}
	if o.kind == kindConfig && o.fingerprint != recordedFingerprint(mountDescription(cur, o.mount)) {
		return ActionUpdate, "", nil
	}
	return "", "", nil
}

// deprecatedMirrors are the fields a Vault role returns under their pre-1.2 names, beside the token_* field
// they mirror.
var deprecatedMirrors = map[string]string{
	"policies": "token_policies", "ttl": "token_ttl", "max_ttl": "token_max_ttl", "period": "token_period",
	"num_uses": "token_num_uses", "bound_cidrs": "token_bound_cidrs",
}

// unmanagedField returns a field of a role as Vault holds it (got) that o does not write and that is set: a
// field somebody added by hand, or one a later Vault release introduced, which may widen who can log in
// (a namespace selector) or what a credential allows. Roles are compared as allowlists: a set field
// agent-sandbox does not know is refused, never ignored, because an update would keep it.
func unmanagedField(o *vaultObject, got map[string]any) (string, bool) {
	if o.kind != kindAuthRole && o.kind != kindSecretsRole {
		return "", false
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ours := o.data[k]; ours || isUnset(got[k]) || (k == "name" && got[k] == o.name) {
			continue // the secrets engine returns the role's own name
		}
		if m, ok := deprecatedMirrors[k]; ok && sameValue(got[k], got[m]) {
			continue
		}
		return k, true
	}
	return "", false
}

// isUnset reports whether a value Vault returned is empty: null, "", 0, false, or an empty list or map.
func isUnset(v any) bool {
	switch n := normalize(v); n {
	case nil, "", "0", "false":
		return true
	}
	return false
}

// mountDescription is the description of the auth ("auth/x") or secrets ("x") mount.
func mountDescription(cur *vaultState, mount string) string {
	if p, ok := strings.CutPrefix(mount, "auth/"); ok {
		return cur.authMounts[p].Description
	}
	return cur.secretsMounts[mount].Description
}

// sameValue compares a value Configure writes with the one Vault returns: numbers by value whatever their
// Go type, lists as sets (Vault sorts and de-duplicates some), maps by their string values.
func sameValue(want, got any) bool {
	return reflect.DeepEqual(normalize(want), normalize(got))
}

func normalize(v any) any {
	switch t := v.(type) {
	case nil:
		return nil
	case string:
		return t
	case bool:
		return strconv.FormatBool(t)
	case int:
		return normalizeNumber(strconv.Itoa(t))
	case int64:
		return normalizeNumber(strconv.FormatInt(t, 10))
	case float64:
		return normalizeNumber(strconv.FormatFloat(t, 'f', -1, 64))
	case json.Number:
		return normalizeNumber(t.String())
	case []string:
		return normalizeList(len(t), func(i int) any { return t[i] })
	case []any:
		return normalizeList(len(t), func(i int) any { return t[i] })
	case map[string]string:
		if len(t) == 0 {
			return nil
		}
		out := make(map[string]any, len(t))
		for k, e := range t {
			out[k] = e
		}
		return out
	case map[string]any:
		if len(t) == 0 {
			return nil
		}
		out := make(map[string]any, len(t))
		for k, e := range t {
			out[k] = normalize(e)
		}
		return out
	default:
		return fmt.Sprint(t)
	}
}

func normalizeNumber(s string) any {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return s
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}

func normalizeList(n int, at func(int) any) any {
	if n == 0 {
		return nil
	}
	out := make([]string, 0, n)
	for i := range n {
		out = append(out, fmt.Sprint(normalize(at(i))))
	}
	slices.Sort(out)
	return slices.Compact(out)
}
