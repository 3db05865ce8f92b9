package broker

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/agent-sandbox/agent-sandbox/internal/policy"
)

// Labels on the Kubernetes objects Vault's secrets engine generates per credential. The engine adds its
// own app.kubernetes.io/managed-by=HashiCorp-Vault and app.kubernetes.io/created-by labels after these,
// so its managed-by value is the one the objects end up with.
const (
	LabelScope = "agent-sandbox.dev/scope"
	// GeneratedNamePrefix starts the name of every ServiceAccount and RoleBinding Vault generates.
	GeneratedNamePrefix = "v-as-"
)

// vaultKind is a kind of Vault object that Configure manages; it is also how change lines name it.
type vaultKind string

const (
	kindAuthMount    vaultKind = "auth method"
	kindSecretsMount vaultKind = "secrets engine"
	kindConfig       vaultKind = "config"
	kindAuthRole     vaultKind = "auth role"
	kindSecretsRole  vaultKind = "secrets role"
	kindPolicy       vaultKind = "policy"
)

// Plugin types of the two mounts: sandboxes log in with Vault's Kubernetes auth method and get their
// credential from the Kubernetes secrets engine.
//
// The auth method sends every login's service-account token to the API server (a TokenReview, with
// Vault's own token as the reviewer). For a token bound to a Pod, the API server answers "authenticated"
// only while that Pod exists with the UID the token names: the token of a deleted sandbox Pod, read from
// the node, no longer logs in (issue 22, finding 3). The JWT auth method, used before, checked tokens
// offline and accepted such a token until it expired.
//
// What the Kubernetes auth method cannot check, and the JWT role did: that the token is bound to a Pod
// at all, and to a Pod named like a sandbox Pod of the tool (the role has no claim constraints, and the
// plugin ignores the Pod the TokenReview reports). That is left to admission, which makes such a token
// impossible to get from the API server: the webhook refuses TokenRequests for a tool's ServiceAccount
// except the kubelet's, bound to an admitted sandbox Pod of that tool on its node, refuses
// service-account token Secrets in the sandbox namespace, and admits no Pod there that is not a sandbox
// Pod (so none runs as a tool's ServiceAccount); the API server itself refuses to bind a token to a Pod
// that runs as another ServiceAccount. Only the holder of the cluster's signing key could still make an
// unbound token, or one bound to another live Pod, and that holder can forge any token.
const (
	authMountType    = "kubernetes"
	secretsMountType = "kubernetes"
)

// Mount descriptions. Vault never returns the service-account token a config holds, so Configure records
// a fingerprint of it in the mount's description and rewrites the config when the token changes.
const (
	authMountDescription    = "agent-sandbox: sandbox credential agents log in with their Pod-bound service-account token"
	secretsMountDescription = "agent-sandbox: per-action Kubernetes credentials for sandbox tools"
	fingerprintMarker       = " (service-account token sha256:"
)

// vaultObject is one object Configure wants in Vault.
type vaultObject struct {
	kind vaultKind
	// name is how the object is printed: a role or policy name, a mount or config path.
	name string
	// path is the API path it is read from and written to (for mounts: the mount path).
	path string
	// data is what is written; for a policy, data["policy"] is its text.
	data map[string]any
	// secret lists keys of data that Vault never returns: written, never compared.
	secret []string
	// fingerprint identifies the secret values of a config; mount is the mount it is recorded on.
	fingerprint string
	mount       string
}

// vaultDesired is the input of desiredVault.
type vaultDesired struct {
	KubernetesHost string
	KubernetesCA   string
	// ReviewerJWT is Vault's own service-account token: the auth method reviews sandbox tokens with it
	// (TokenReview), and the secrets engine creates ServiceAccounts, Roles and RoleBindings with it. Empty
	// in a dry run before it exists.
	ReviewerJWT string
}

// desiredVault renders the Vault objects the policy calls for, in the order they must be written: mounts,
// configs, ACL policies, then the roles that refer to the policies.
func desiredVault(p *policy.Policy, in vaultDesired) []vaultObject {
	ca := &p.Spec.Sandbox.CredentialAgent
	authMount, secretsMount := mountPath(ca.VaultAuthMount), mountPath(ca.VaultSecretsMount)
	fp := fingerprint(in.ReviewerJWT)
	objs := []vaultObject{
		{kind: kindAuthMount, name: "auth/" + authMount, path: authMount,
			data: map[string]any{"type": authMountType, "description": describeMount(authMountDescription, fp)}},
		{kind: kindSecretsMount, name: secretsMount, path: secretsMount,
			data: map[string]any{"type": secretsMountType, "description": describeMount(secretsMountDescription, fp)}},
		{kind: kindConfig, name: "auth/" + authMount + "/config", path: "auth/" + authMount + "/config",
			data: map[string]any{
				"kubernetes_host":    in.KubernetesHost,
				"kubernetes_ca_cert": in.KubernetesCA,
				// Vault runs outside the cluster, or in it with a token of its own: never fall back to
				// the token and CA of a Pod Vault might run in.
				"disable_local_ca_jwt": true,
				"token_reviewer_jwt":   in.ReviewerJWT,
			},
			secret: []string{"token_reviewer_jwt"}, fingerprint: fp, mount: "auth/" + authMount},
		{kind: kindConfig, name: secretsMount + "/config", path: secretsMount + "/config",
			data: map[string]any{
				"kubernetes_host":      in.KubernetesHost,
				"kubernetes_ca_cert":   in.KubernetesCA,
				"disable_local_ca_jwt": true,
				"service_account_jwt":  in.ReviewerJWT,
			},
			secret: []string{"service_account_jwt"}, fingerprint: fp, mount: secretsMount},
	}
	for i := range p.Spec.Tools {
		t := &p.Spec.Tools[i]
		s := findScope(p, t.Scope)
		objs = append(objs, vaultObject{kind: kindPolicy, name: t.VaultPolicy(), path: "sys/policies/acl/" + t.VaultPolicy(),
			data: map[string]any{"policy": toolPolicy(t, s, secretsMount)}})
	}
	for i := range p.Spec.Tools {
		t := &p.Spec.Tools[i]
		s := findScope(p, t.Scope)
		ttl := credentialTTL(s)
		objs = append(objs, vaultObject{kind: kindAuthRole, name: t.VaultAuthRole(), path: "auth/" + authMount + "/role/" + t.VaultAuthRole(),
			data: authRoleData(t, p.Spec.Sandbox.Namespace, ca.VaultAudience, ttl)})
	}
	for i := range p.Spec.Scopes {
		s := &p.Spec.Scopes[i]
		namespaces := scopeNamespaces(p, s.Name)
		if len(namespaces) == 0 {
			// No tool uses the scope; Vault refuses a role without namespaces, and nobody could use it.
			continue
		}
		ttl := credentialTTL(s)
		objs = append(objs, vaultObject{kind: kindSecretsRole, name: s.VaultSecretsRole(), path: secretsMount + "/roles/" + s.VaultSecretsRole(),
			data: map[string]any{
				// A credential binds the scope's ClusterRole (written once by Configure) in the target
				// namespace: Vault creates a ServiceAccount and a RoleBinding per call, not a Role too.
				// The engine takes exactly one of these three and keeps a field the write leaves out, so
				// the other two are written empty: a role written by an earlier release (with rules) is
				// converted in place, and any release that writes all three can convert it back.
				"kubernetes_role_type":          "ClusterRole",
				"kubernetes_role_name":          ScopeRoleName(s),
				"generated_role_rules":          "",
				"service_account_name":          "",
				"allowed_kubernetes_namespaces": namespaces,
				// ORed with the namespaces above: written empty, as Vault keeps what a write leaves out.
				"allowed_kubernetes_namespace_selector": "",
				"token_default_ttl":                     ttl,
				"token_max_ttl":                         ttl,
				"name_template":                         nameTemplate(s),
				"extra_labels": map[string]string{
					"app.kubernetes.io/managed-by": "vault",
					LabelScope:                     s.Name,
				},
			}})
	}
	return objs
}

// managedKinds are the kinds whose objects Configure prunes: those named with policy.VaultPrefix that the
// policy no longer declares.
var managedKinds = []vaultKind{kindAuthRole, kindSecretsRole, kindPolicy}

// credentialTTL is the scope's TTL in whole seconds, raised to Kubernetes' floor for service-account tokens.
func credentialTTL(s *policy.Scope) int64 {
	d := s.TTL.Duration
	if d < policy.MinCredentialTTL {
		d = policy.MinCredentialTTL
	}
	return int64(d / time.Second)
}

// scopeNamespaces is the sorted union of the namespaces of the tools that use the scope.
func scopeNamespaces(p *policy.Policy, scope string) []string {
	var out []string
	for _, t := range p.Spec.Tools {
		if t.Scope == scope {
			out = append(out, t.Namespaces...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// targetNamespaces maps each namespace some tool targets to the scopes that may be minted there.
func targetNamespaces(p *policy.Policy) map[string][]*policy.Scope {
	out := map[string][]*policy.Scope{}
	for _, t := range p.Spec.Tools {
		s := findScope(p, t.Scope)
		if s == nil {
			continue
		}
		for _, ns := range t.Namespaces {
			if !slices.Contains(out[ns], s) {
				out[ns] = append(out[ns], s)
			}
		}
	}
	return out
}

func findScope(p *policy.Policy, name string) *policy.Scope {
	for i := range p.Spec.Scopes {
		if p.Spec.Scopes[i].Name == name {
			return &p.Spec.Scopes[i]
		}
	}
	return nil
}

// rbacRules converts the scope's rules to RBAC policy rules.
func rbacRules(s *policy.Scope) []rbacv1.PolicyRule {
	out := make([]rbacv1.PolicyRule, 0, len(s.Rules))
	for _, r := range s.Rules {
		out = append(out, rbacv1.PolicyRule{
			APIGroups:     slices.Clone(r.APIGroups),
			Resources:     slices.Clone(r.Resources),
			Verbs:         slices.Clone(r.Verbs),
			ResourceNames: slices.Clone(r.ResourceNames),
		})
	}
	return out
}

// nameTemplate names the generated ServiceAccount and RoleBinding "v-as-<scope>-<unix time>-<random>",
// so that `kubectl get sa` shows at a glance which scope and when. The scope part is cut to 37 characters
// so that the whole name stays within 62 with its time and random parts intact.
func nameTemplate(s *policy.Scope) string {
	scope := s.Name
	if len(scope) > 37 {
		scope = strings.TrimRight(scope[:37], "-")
	}
	return fmt.Sprintf(`{{ printf "%s%s-%%s-%%s" (unix_time) (random 8) | truncate 62 | lowercase }}`, GeneratedNamePrefix, scope)
}

// toolPolicy is the tool's Vault ACL policy: mint its own scope's credentials, and revoke its own token
// (the default policy, which would otherwise allow that, is not attached).
// managedPolicyHeader starts every ACL policy Configure writes (it has done so from the start). ACL
// policies have no description or metadata, so this first line is how Configure tells its own policies
// from somebody else's that happen to have an agent-sandbox-* name.
const managedPolicyHeader = `# Managed by "agent-sandbox vault configure"`

// managedPolicy reports whether an ACL policy's text is one Configure wrote.
func managedPolicy(text string) bool { return strings.HasPrefix(text, managedPolicyHeader) }

func toolPolicy(t *policy.Tool, s *policy.Scope, secretsMount string) string {
	role := ""
	if s != nil {
		role = s.VaultSecretsRole()
	}
	return fmt.Sprintf(managedPolicyHeader+`; changes are overwritten.
# Tool %s: mint credentials of scope %s only, in its own namespaces only (no other parameter: not a
# cluster-wide binding, not another TTL or audience), and revoke its own token when the tool has finished.
path "%s/creds/%s" {
  capabilities = ["update"]
  allowed_parameters = {
    "kubernetes_namespace" = [%s]
  }
}

path "auth/token/revoke-self" {
  capabilities = ["update"]
}
`, t.Name, t.Scope, secretsMount, role, hclStrings(t.Namespaces))
}

// hclStrings lists values as HCL string literals, sorted: `"a", "b"`. Namespace names are DNS labels, so
// %q quotes them exactly as HCL reads them.
func hclStrings(values []string) string {
	sorted := slices.Sorted(slices.Values(values))
	quoted := make([]string, 0, len(sorted))
	for _, v := range slices.Compact(sorted) {
		quoted = append(quoted, fmt.Sprintf("%q", v))
	}
	return strings.Join(quoted, ", ")
}

// fingerprint identifies a secret value without revealing it.
func fingerprint(secret string) string {
	if secret == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:8])
}

func describeMount(base, fp string) string {
	if fp == "" {
		return base
	}
	return base + fingerprintMarker + fp + ")"
}

// recordedFingerprint extracts the fingerprint describeMount put into a mount description.
func recordedFingerprint(description string) string {
	i := strings.LastIndex(description, fingerprintMarker)
	if i < 0 || !strings.HasSuffix(description, ")") {
		return ""
	}
	return strings.TrimSuffix(description[i+len(fingerprintMarker):], ")")
}

// authRoleData is the Kubernetes auth method's login role of tool t.
func authRoleData(t *policy.Tool, sandboxNamespace, audience string, ttl int64) map[string]any {
	return map[string]any{
		// Only a token of this tool's ServiceAccount in the sandbox namespace, for the Vault
		// audience, that the API server still authenticates: for the kubelet's projected token,
		// only while its sandbox Pod exists (see authMountType for what is no longer checked here
		// and what covers it). The token lives ten minutes (Kubernetes' minimum).
		"bound_service_account_names":      []string{t.ServiceAccount},
		"bound_service_account_namespaces": []string{sandboxNamespace},
		"audience":                         audience,
		// One entity per ServiceAccount UID: a ServiceAccount deleted and made again under the
		// same name is a new identity.
		"alias_name_source": "serviceaccount_uid",
		"token_policies":    []string{t.VaultPolicy()},
		// A service token, so that revoke-self also revokes the leases it created; no default
		// policy, so the token can do exactly what its own policy says.
		"token_type":              "service",
		"token_no_default_policy": true,
		"token_ttl":               ttl,
		"token_max_ttl":           ttl,
		// Vault keeps a field a write leaves out, so those that would widen the role are written
		// empty: a namespace selector (ORed with the namespaces above), a period or explicit max
		// TTL (a token renewable past ten minutes), CIDRs and a use count. compareObject refuses
		// any other field that is set (unmanagedField).
		"bound_service_account_namespace_selector": "",
		"token_period":           0,
		"token_explicit_max_ttl": 0,
		"token_bound_cidrs":      []string{},
		"token_num_uses":         0,
	}
}
