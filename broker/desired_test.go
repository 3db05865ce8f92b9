package broker

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/policy"
)

// testPolicy decodes testdata/policy.yaml (with defaults applied).
func testPolicy(t *testing.T) *policy.Policy {
	t.Helper()
	data, err := os.ReadFile("testdata/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Decode(data)
	if err != nil {
		t.Fatalf("decode test policy: %v", err)
	}
	return p
}

// testCompiled loads testdata/policy.yaml as the webhook and vault configure do.
func testCompiled(t *testing.T) *policy.Compiled {
	t.Helper()
	p, err := policy.LoadFile("testdata/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func testDesired(p *policy.Policy) []vaultObject {
	return desiredVault(p, vaultDesired{KubernetesHost: "https://api:6443", KubernetesCA: "CA PEM", ReviewerJWT: "reviewer-jwt"})
}

func findObject(t *testing.T, objs []vaultObject, kind vaultKind, name string) *vaultObject {
	t.Helper()
	for i := range objs {
		if objs[i].kind == kind && objs[i].name == name {
			return &objs[i]
		}
	}
	t.Fatalf("no %s %s among %d objects", kind, name, len(objs))
	return nil
}

func TestDesiredVaultObjects(t *testing.T) {
	objs := testDesired(testPolicy(t))
	var got []string
	for _, o := range objs {
		got = append(got, string(o.kind)+" "+o.name+" @ "+o.path)
	}
	want := []string{
		"auth method auth/k8s-auth @ k8s-auth",
		"secrets engine k8s-creds @ k8s-creds",
		"config auth/k8s-auth/config @ auth/k8s-auth/config",
		"config k8s-creds/config @ k8s-creds/config",
		"policy agent-sandbox-tool-get-pods @ sys/policies/acl/agent-sandbox-tool-get-pods",
		"policy agent-sandbox-tool-get-pods-again @ sys/policies/acl/agent-sandbox-tool-get-pods-again",
		"policy agent-sandbox-tool-edit-config @ sys/policies/acl/agent-sandbox-tool-edit-config",
		"auth role agent-sandbox-get-pods @ auth/k8s-auth/role/agent-sandbox-get-pods",
		"auth role agent-sandbox-get-pods-again @ auth/k8s-auth/role/agent-sandbox-get-pods-again",
		"auth role agent-sandbox-edit-config @ auth/k8s-auth/role/agent-sandbox-edit-config",
		// The unused scope gets no role: Vault refuses one without namespaces.
		"secrets role agent-sandbox-pod-reader @ k8s-creds/roles/agent-sandbox-pod-reader",
		"secrets role agent-sandbox-config-editor @ k8s-creds/roles/agent-sandbox-config-editor",
	}
	if !slices.Equal(got, want) {
		t.Errorf("objects:\n got %q\nwant %q", got, want)
	}
}

func TestDesiredAuthRole(t *testing.T) {
	objs := testDesired(testPolicy(t))
	m := findObject(t, objs, kindAuthMount, "auth/k8s-auth")
	// The Kubernetes auth method: every login's token goes to the API server (TokenReview), which refuses
	// the token of a Pod that no longer exists. (The JWT auth method checked tokens offline.)
	if m.data["type"] != "kubernetes" {
		t.Errorf("auth mount type %v, want kubernetes", m.data["type"])
	}
	r := findObject(t, objs, kindAuthRole, "agent-sandbox-edit-config")
	want := map[string]any{
		"bound_service_account_names":      []string{"config-editor-sa"},
		"bound_service_account_namespaces": []string{"sandbox"},
		"audience":                         "vault-test",
		"alias_name_source":                "serviceaccount_uid",
		"token_policies":                   []string{"agent-sandbox-tool-edit-config"},
		"token_type":                       "service",
		"token_no_default_policy":          true,
		"token_ttl":                        int64(900),
		"token_max_ttl":                    int64(900),
		// Written empty so that a write clears them (Vault keeps what a write leaves out).
		"bound_service_account_namespace_selector": "",
		"token_period":           0,
		"token_explicit_max_ttl": 0,
		"token_bound_cidrs":      []string{},
		"token_num_uses":         0,
	}
	for k, v := range want {
		if !sameValue(v, r.data[k]) {
			t.Errorf("%s = %#v, want %#v", k, r.data[k], v)
		}
	}
	if len(r.data) != len(want) {
		t.Errorf("auth role has %d fields, want %d: %v", len(r.data), len(want), r.data)
	}
	// The default ServiceAccount name is derived from the tool name.
	r = findObject(t, objs, kindAuthRole, "agent-sandbox-get-pods")
	if !sameValue([]string{"tool-get-pods"}, r.data["bound_service_account_names"]) {
		t.Errorf("get_pods is bound to %v", r.data["bound_service_account_names"])
	}
}

func TestDesiredSecretsRole(t *testing.T) {
	objs := testDesired(testPolicy(t))
	r := findObject(t, objs, kindSecretsRole, "agent-sandbox-pod-reader")
	if got := r.data["allowed_kubernetes_namespaces"]; !slices.Equal(got.([]string), []string{"team-a", "team-b"}) {
		t.Errorf("pod-reader namespaces = %v, want the union of its tools' namespaces", got)
	}
	// A credential binds the scope's ClusterRole; Vault generates no Role per call, and the rules of an
	// earlier release's role are cleared (the engine takes one of the two).
	if r.data["kubernetes_role_type"] != "ClusterRole" || r.data["kubernetes_role_name"] != "agent-sandbox-scope-pod-reader" ||
		r.data["generated_role_rules"] != "" || r.data["service_account_name"] != "" || r.data["token_default_ttl"] != int64(600) || r.data["token_max_ttl"] != int64(600) {
		t.Errorf("pod-reader role: %v", r.data)
	}
	rules := scopeClusterRole(findScope(testPolicy(t), "pod-reader"))
	if rules.Name != "agent-sandbox-scope-pod-reader" || rules.Labels[LabelScope] != "pod-reader" || rules.Labels[labelManagedBy] != managedBy {
		t.Errorf("scope cluster role meta: %+v", rules.ObjectMeta)
	}
	if len(rules.Rules) != 1 || !slices.Equal(rules.Rules[0].Resources, []string{"pods"}) || !slices.Equal(rules.Rules[0].Verbs, []string{"get", "list"}) {
		t.Errorf("rules = %+v", rules.Rules)
	}
	labels := r.data["extra_labels"].(map[string]string)
	if labels[LabelScope] != "pod-reader" || labels["app.kubernetes.io/managed-by"] != "vault" {
		t.Errorf("extra_labels = %v", labels)
	}
	tmpl := r.data["name_template"].(string)
	if !strings.Contains(tmpl, `"v-as-pod-reader-%s-%s"`) || !strings.Contains(tmpl, "truncate 62") {
		t.Errorf("name_template = %s", tmpl)
	}

	ce := findObject(t, objs, kindSecretsRole, "agent-sandbox-config-editor")
	if ce.data["kubernetes_role_name"] != "agent-sandbox-scope-config-editor" {
		t.Errorf("config-editor binds %v", ce.data["kubernetes_role_name"])
	}
	if ceRules := scopeClusterRole(findScope(testPolicy(t), "config-editor")).Rules; !slices.Equal(ceRules[0].ResourceNames, []string{"app-config"}) {
		t.Errorf("resourceNames lost: %+v", ceRules)
	}
	if ce.data["token_default_ttl"] != int64(900) {
		t.Errorf("config-editor ttl = %v, want the scope's 15m", ce.data["token_default_ttl"])
	}
}

func TestNameTemplateKeepsTheRandomPart(t *testing.T) {
	long := &policy.Scope{Name: strings.Repeat("a", 40) + "-" + strings.Repeat("b", 22)}
	tmpl := nameTemplate(long)
	scope := strings.TrimPrefix(strings.Split(tmpl, `"`)[1], GeneratedNamePrefix)
	scope = strings.TrimSuffix(scope, "-%s-%s")
	if len(GeneratedNamePrefix)+len(scope)+1+10+1+8 > 62 {
		t.Errorf("a %d-character scope leaves no room for the time and random parts: %s", len(long.Name), tmpl)
	}
}

func TestCredentialTTLFloor(t *testing.T) {
	s := &policy.Scope{Name: "x"}
	s.TTL.Duration = 0
	if got := credentialTTL(s); got != 600 {
		t.Errorf("credentialTTL(0) = %d, want Kubernetes' floor of 600", got)
	}
}

func TestToolPolicy(t *testing.T) {
	objs := testDesired(testPolicy(t))
	text := findObject(t, objs, kindPolicy, "agent-sandbox-tool-edit-config").data["policy"].(string)
	for _, want := range []string{
		`path "k8s-creds/creds/agent-sandbox-config-editor" {` + "\n" + `  capabilities = ["update"]`,
		`path "auth/token/revoke-self" {` + "\n" + `  capabilities = ["update"]`,
		// Only the namespace parameter, and only the tool's own namespaces: no cluster-wide binding, no
		// other TTL or audience, and not the namespace of another tool that shares the scope.
		"  allowed_parameters = {\n    \"kubernetes_namespace\" = [\"team-a\"]\n  }",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("policy lacks %q:\n%s", want, text)
		}
	}
	if n := strings.Count(text, "path "); n != 2 {
		t.Errorf("policy has %d paths, want exactly 2:\n%s", n, text)
	}
	for _, forbidden := range []string{"read", "create", "delete", "list", "sudo", "*"} {
		if strings.Contains(text, `"`+forbidden+`"`) {
			t.Errorf("policy grants %q:\n%s", forbidden, text)
		}
	}
}

func TestConfigsCarryTheReviewerToken(t *testing.T) {
	objs := testDesired(testPolicy(t))
	// The auth method reviews sandbox tokens with Vault's own token, never with the token being
	// reviewed nor with that of a Pod Vault might run in.
	a := findObject(t, objs, kindConfig, "auth/k8s-auth/config")
	want := map[string]any{"kubernetes_host": "https://api:6443", "kubernetes_ca_cert": "CA PEM", "disable_local_ca_jwt": true, "token_reviewer_jwt": "reviewer-jwt"}
	for k, v := range want {
		if !sameValue(v, a.data[k]) {
			t.Errorf("auth config %s = %#v, want %#v", k, a.data[k], v)
		}
	}
	if len(a.data) != len(want) || !slices.Equal(a.secret, []string{"token_reviewer_jwt"}) || a.mount != "auth/k8s-auth" {
		t.Errorf("auth config: %v, secret %v, mount %q", a.data, a.secret, a.mount)
	}
	s := findObject(t, objs, kindConfig, "k8s-creds/config")
	if s.data["service_account_jwt"] != "reviewer-jwt" || s.data["disable_local_ca_jwt"] != true || s.data["kubernetes_ca_cert"] != "CA PEM" {
		t.Errorf("secrets config: %v", s.data)
	}
	if s.fingerprint == "" || strings.Contains(s.fingerprint, "reviewer") || a.fingerprint != s.fingerprint {
		t.Errorf("fingerprints %q %q", s.fingerprint, a.fingerprint)
	}
	for _, name := range []string{"k8s-creds", "auth/k8s-auth"} {
		kind := kindSecretsMount
		if strings.HasPrefix(name, "auth/") {
			kind = kindAuthMount
		}
		m := findObject(t, objs, kind, name)
		if got := recordedFingerprint(m.data["description"].(string)); got != s.fingerprint {
			t.Errorf("%s description records %q, want %q", name, got, s.fingerprint)
		}
	}
}

func TestVaultRoleHoldsWhatItGrants(t *testing.T) {
	p := testPolicy(t)
	targets := targetNamespaces(p)
	if len(targets) != 2 || len(targets["team-a"]) != 2 || len(targets["team-b"]) != 1 {
		t.Fatalf("targets = %v", targets)
	}
	role := vaultRole("team-a", targets["team-a"])
	// The secrets engine's own verbs, then `bind` on the ClusterRoles of exactly the scopes minted here, by
	// name: Vault may not create or change any role, nor bind any other.
	if len(role.Rules) != len(secretsEngineRules)+1 {
		t.Fatalf("team-a role has %d rules: %+v", len(role.Rules), role.Rules)
	}
	bind := role.Rules[len(role.Rules)-1]
	if !slices.Equal(bind.Verbs, []string{"bind"}) || !slices.Equal(bind.Resources, []string{"clusterroles"}) ||
		!slices.Equal(bind.ResourceNames, []string{"agent-sandbox-scope-config-editor", "agent-sandbox-scope-pod-reader"}) {
		t.Errorf("team-a bind rule: %+v", bind)
	}
	for _, r := range role.Rules {
		if slices.Contains(r.Verbs, "escalate") || slices.Contains(r.Verbs, "*") || slices.Contains(r.Resources, "roles") ||
			slices.Contains(r.Resources, "clusterrolebindings") || (slices.Contains(r.Verbs, "bind") && len(r.ResourceNames) == 0) {
			t.Errorf("vault role grants %v on %v %v", r.Verbs, r.Resources, r.ResourceNames)
		}
	}
	teamB := vaultRole("team-b", targets["team-b"])
	if bind := teamB.Rules[len(teamB.Rules)-1]; !slices.Equal(bind.ResourceNames, []string{"agent-sandbox-scope-pod-reader"}) {
		t.Errorf("team-b may bind %v, but no tool can mint config-editor there", bind.ResourceNames)
	}
	for _, r := range teamB.Rules {
		if slices.Contains(r.Resources, "configmaps") || slices.Contains(r.Resources, "pods") {
			t.Errorf("team-b role grants %v itself: Vault needs only to bind the scopes' roles", r.Resources)
		}
	}
}
