package policy

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"
)

const defaultPolicyPath = "../../policy/policy.yaml"

func loadDefault(t testing.TB) *Compiled {
	t.Helper()
	c, err := LoadFile(defaultPolicyPath)
	if err != nil {
		t.Fatalf("default policy: %v", err)
	}
	return c
}

func TestDefaultPolicy(t *testing.T) {
	c := loadDefault(t)
	for _, name := range []string{"k8s_get_pod_status", "terraform_plan", "terraform_apply"} {
		if _, err := c.Tool(name); err != nil {
			t.Errorf("default policy lacks %s: %v", name, err)
		}
	}
	apply, _ := c.Tool("terraform_apply")
	if !apply.RequiresApproval || apply.Tier != TierApply {
		t.Errorf("terraform_apply must be tier apply with approval, got %s/%v", apply.Tier, apply.RequiresApproval)
	}
	read, _ := c.Tool("k8s_get_pod_status")
	if read.RequiresApproval || read.Tier != TierRead {
		t.Errorf("k8s_get_pod_status must be a read tool without approval")
	}
	if got := len(c.Spec.AdmissionRules); got < 15 {
		t.Errorf("default policy has %d admission rules, want the isolation rule set", got)
	}
	if _, err := c.Tool("kubectl_exec"); !errors.Is(err, ErrUnknownTool) {
		t.Errorf("unknown tool: got %v, want ErrUnknownTool", err)
	}
}

func mutateDefault(t *testing.T, from, to string) []byte {
	t.Helper()
	data, err := os.ReadFile(defaultPolicyPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), from) {
		t.Fatalf("default policy no longer contains %q", from)
	}
	return []byte(strings.Replace(string(data), from, to, 1))
}

func TestLoadErrorsHavePaths(t *testing.T) {
	tests := []struct {
		name, from, to string
		want           []string
	}{
		{"unknown field", "    tier: read\n", "    tier: read\n    tierr: read\n", []string{`unknown field "spec.tools[0].tierr"`}},
		{"duplicate field", "    tier: read\n", "    tier: read\n    tier: plan\n", []string{`key "tier" already set`}},
		{"wrong type", "maxDeadline: 15m", "maxDeadline: [1]", []string{"maxDeadline"}},
		{"bad tier", "    tier: read\n", "    tier: admin\n", []string{`spec.tools[0].tier: Unsupported value: "admin"`}},
		{"unknown scope", "    scope: pod-reader\n", "    scope: everything\n", []string{`spec.tools[0].scope: Not found: "everything"`}},
		{"short ttl", "  - name: pod-reader\n    ttl: 10m", "  - name: pod-reader\n    ttl: 5m", []string{"spec.scopes[0].ttl", "shorter than 10m"}},
		{"wildcard verb", "      verbs: [get, list]\n", "      verbs: [\"*\"]\n", []string{"spec.scopes[0].rules[0].verbs[0]", "wildcards"}},
		{"undeclared placeholder", `"--selector={{label_selector}}"`, `"--selector={{selector}}"`, []string{"spec.tools[0].command[4]", "undeclared parameter selector"}},
		{"sandbox namespace as target", "    namespaces: [demo-app]\n    namespaceParameter: namespace", "    namespaces: [demo-app, agent-sandbox]\n    namespaceParameter: namespace", []string{"spec.tools[0].namespaces[1]", "sandbox namespace"}},
		{"string without pattern", "      pattern: '[a-z0-9]([-a-z0-9]*[a-z0-9])?'\n      maxLength: 63", "      maxLength: 63", []string{"spec.tools[0].parameters[0].pattern: Required"}},
		{"bad vault namespace", "      vaultAudience: vault\n", "      vaultAudience: vault\n      vaultNamespace: /admin//team a\n", []string{"spec.sandbox.credentialAgent.vaultNamespace", "Vault namespace path"}},
		{"token ttl too long", "tokenTTL: 30m", "tokenTTL: 2h", []string{"spec.approval.tokenTTL"}},
		{"cpu request above the limit", `resources: {cpu: "1", cpuRequest: 50m, memory: 128Mi}`, `resources: {cpu: "1", cpuRequest: "2", memory: 128Mi}`, []string{"spec.tools[0].resources.cpuRequest", "at most cpu (1)"}},
		{"zero cpu request", `resources: {cpu: "1", cpuRequest: 50m, memory: 128Mi}`, `resources: {cpu: "1", cpuRequest: "0", memory: 128Mi}`, []string{"spec.tools[0].resources.cpuRequest", "more than 0"}},
		{"agent cpu request above its limit", "resources: {cpu: 200m, cpuRequest: 50m, memory: 64Mi}", "resources: {cpu: 200m, cpuRequest: 300m, memory: 64Mi}", []string{"spec.sandbox.credentialAgent.resources.cpuRequest"}},
		{"bad CEL", "- name: runtime-class\n    expression: |-\n", "- name: runtime-class\n    expression: |-\n      podSpec.( ||\n", []string{"spec.admissionRules[0].expression:"}},
		{"non-bool CEL", "settings.runtimeClassName != '' &&\n      podSpec.?runtimeClassName.orValue('') == settings.runtimeClassName", "podSpec.?runtimeClassName.orValue('')", []string{"spec.admissionRules[0].expression:", "bool"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(mutateDefault(t, tt.from, tt.to))
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("Load: got %v, want *policy.Error", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// TestToolServiceAccountsAreTheirOwn: two tools under one ServiceAccount were accepted (found in review,
// 2026-12-06); Vault's login role binds a tool by its ServiceAccount, so a read tool's Pod could log in as
// terraform_apply and mint its credential without an approval.
func TestToolServiceAccountsAreTheirOwn(t *testing.T) {
	for _, tt := range []struct {
		name string
		data string
		want []string
	}{
		{"shared by a read tool and terraform_apply", strings.Replace(strings.Replace(string(mutateDefault(t, "", "")),
			"    tier: read\n", "    tier: read\n    serviceAccount: shared-tool\n", 1),
			"    tier: apply\n", "    tier: apply\n    serviceAccount: shared-tool\n", 1),
			[]string{"spec.tools[2].serviceAccount", "tool k8s_get_pod_status runs as this ServiceAccount too"}},
		{"a tool's default name taken by another", string(mutateDefault(t, "    tier: read\n", "    tier: read\n    serviceAccount: tool-terraform-apply\n")),
			[]string{"spec.tools[2].serviceAccount", "tool k8s_get_pod_status runs as this ServiceAccount too"}},
		{"the namespace's default", string(mutateDefault(t, "    tier: read\n", "    tier: read\n    serviceAccount: default\n")),
			[]string{"spec.tools[0].serviceAccount", "default ServiceAccount"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load([]byte(tt.data))
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("Load: got %v, want *policy.Error", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestLoadReportsEveryProblem(t *testing.T) {
	data := mutateDefault(t, "    tier: read\n    scope: pod-reader\n", "    tier: root\n    scope: nope\n")
	_, err := Load(data)
	var pe *Error
	if !errors.As(err, &pe) || len(pe.Problems) < 2 {
		t.Fatalf("want two problems, got %v", err)
	}
}

func TestInvoke(t *testing.T) {
	c := loadDefault(t)
	pods, _ := c.Tool("k8s_get_pod_status")
	apply, _ := c.Tool("terraform_apply")
	plan := strings.Repeat("ab", 32)
	tests := []struct {
		name     string
		tool     *Tool
		params   map[string]any
		wantArgv []string
		wantNS   string
		wantErr  error
		errText  string
	}{
		{name: "minimal", tool: pods, params: map[string]any{"namespace": "demo-app"},
			wantArgv: []string{"/agent-sandbox", "run", "pod-status", "--namespace=demo-app"}, wantNS: "demo-app"},
		{name: "with selector", tool: pods, params: map[string]any{"namespace": "demo-app", "label_selector": "app=web,tier!=db"},
			wantArgv: []string{"/agent-sandbox", "run", "pod-status", "--namespace=demo-app", "--selector=app=web,tier!=db"}, wantNS: "demo-app"},
		{name: "namespace outside the tool's list", tool: pods, params: map[string]any{"namespace": "kube-system"}, wantErr: ErrNamespaceDenied},
		{name: "missing required", tool: pods, params: map[string]any{}, wantErr: ErrInvalidParameters, errText: `"namespace" is required`},
		{name: "unknown parameter", tool: pods, params: map[string]any{"namespace": "demo-app", "all_namespaces": true}, wantErr: ErrInvalidParameters, errText: "is not a parameter"},
		{name: "shell injection", tool: pods, params: map[string]any{"namespace": "demo-app; rm -rf /"}, wantErr: ErrInvalidParameters, errText: "must match"},
		{name: "flag injection in selector", tool: pods, params: map[string]any{"namespace": "demo-app", "label_selector": "--kubeconfig=/etc/x"}, wantErr: ErrInvalidParameters},
		{name: "newline injection", tool: pods, params: map[string]any{"namespace": "demo-app\nx"}, wantErr: ErrInvalidParameters},
		{name: "wrong type", tool: pods, params: map[string]any{"namespace": 7}, wantErr: ErrInvalidParameters, errText: "must be a string"},
		{name: "too long", tool: pods, params: map[string]any{"namespace": strings.Repeat("a", 64)}, wantErr: ErrInvalidParameters, errText: "longer than 63"},
		{name: "apply", tool: apply, params: map[string]any{"workspace": "k8s-demo", "plan_id": plan},
			wantArgv: []string{"/agent-sandbox", "run", "terraform-apply", "--workspace=k8s-demo", "--namespace=demo-app", "--plan-file=/plan/tfplan", "--plan-id=" + plan}, wantNS: "demo-app"},
		{name: "apply bad plan id", tool: apply, params: map[string]any{"workspace": "k8s-demo", "plan_id": "latest"}, wantErr: ErrInvalidParameters},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv, err := tt.tool.Invoke(tt.params)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("got %v, want %v", err, tt.wantErr)
				}
				if tt.errText != "" && !strings.Contains(err.Error(), tt.errText) {
					t.Errorf("error %q does not say %q", err, tt.errText)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(inv.Argv, tt.wantArgv) {
				t.Errorf("argv\n got %q\nwant %q", inv.Argv, tt.wantArgv)
			}
			if inv.TargetNamespace != tt.wantNS || inv.Scope != tt.tool.Scope {
				t.Errorf("namespace/scope = %s/%s", inv.TargetNamespace, inv.Scope)
			}
		})
	}
}

func TestInvokeIntegerAndDefaults(t *testing.T) {
	minV, maxV := int64(1), int64(10)
	tool := &Tool{Name: "t", Namespaces: []string{"x"}, Command: []string{"run", "--n={{n}}", "--v={{v}}"}, Parameters: []Parameter{
		{Name: "n", Type: TypeInteger, Minimum: &minV, Maximum: &maxV, Default: float64(3)},
		{Name: "v", Type: TypeBoolean},
	}}
	inv, err := tool.Invoke(map[string]any{"v": true})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"run", "--n=3", "--v=true"}; !reflect.DeepEqual(inv.Argv, want) {
		t.Errorf("argv %q, want %q", inv.Argv, want)
	}
	for _, bad := range []any{float64(2.5), float64(11), "3", int64(0)} {
		if _, err := tool.Invoke(map[string]any{"n": bad}); !errors.Is(err, ErrInvalidParameters) {
			t.Errorf("n=%v: got %v, want ErrInvalidParameters", bad, err)
		}
	}
}

// TestInvokeIntegerRange covers the conversion of JSON numbers to int64 at the edges of its range. A
// parameter with only a maximum is the dangerous case: a value that wrapped to MinInt64 would pass it.
func TestInvokeIntegerRange(t *testing.T) {
	maxV := int64(100)
	tool := &Tool{Name: "t", Namespaces: []string{"x"}, Command: []string{"run", "--m={{m}}", "--u={{u}}"}, Parameters: []Parameter{
		{Name: "m", Type: TypeInteger, Maximum: &maxV},
		{Name: "u", Type: TypeInteger},
	}}
	tests := []struct {
		name    string
		param   string
		value   any
		want    int64  // when errText is empty
		errText string // the reason the value is refused
	}{
		{name: "float in range", param: "m", value: float64(-7), want: -7},
		{name: "float 2^63 wraps to MinInt64", param: "m", value: float64(9223372036854775808), errText: "outside the 64-bit integer range"},
		{name: "float 1e19", param: "m", value: 1e19, errText: "outside the 64-bit integer range"},
		{name: "float -1e19", param: "m", value: -1e19, errText: "outside the 64-bit integer range"},
		{name: "float -2^63 is MinInt64", param: "u", value: float64(math.MinInt64), want: math.MinInt64},
		{name: "largest float below 2^63", param: "u", value: math.Nextafter(0x1p63, 0), want: 9223372036854774784},
		{name: "float 2^63 without bounds", param: "u", value: 0x1p63, errText: "outside the 64-bit integer range"},
		{name: "non-integral float", param: "u", value: 0.5, errText: "must be an integer"},
		{name: "NaN", param: "u", value: math.NaN(), errText: "must be a finite number"},
		{name: "+Inf", param: "m", value: math.Inf(1), errText: "must be a finite number"},
		{name: "-Inf", param: "m", value: math.Inf(-1), errText: "must be a finite number"},
		{name: "json.Number in range", param: "m", value: json.Number("-9223372036854775808"), want: math.MinInt64},
		{name: "json.Number MaxInt64", param: "u", value: json.Number("9223372036854775807"), want: math.MaxInt64},
		{name: "json.Number 2^63", param: "m", value: json.Number("9223372036854775808"), errText: "outside the 64-bit integer range"},
		{name: "json.Number -2^63-1", param: "m", value: json.Number("-9223372036854775809"), errText: "outside the 64-bit integer range"},
		{name: "json.Number 1e19", param: "m", value: json.Number("1e19"), errText: "outside the 64-bit integer range"},
		{name: "json.Number fraction", param: "m", value: json.Number("1.5"), errText: "must be an integer"},
		{name: "json.Number garbage", param: "m", value: json.Number("NaN"), errText: "must be an integer"},
		{name: "json.Number overflowing float", param: "m", value: json.Number("1e400"), errText: "outside the 64-bit integer range"},
		{name: "json.Number Inf", param: "m", value: json.Number("Inf"), errText: "must be a finite number"},
		{name: "json.Number exponent form", param: "m", value: json.Number("1e2"), errText: "must be an integer"},
		{name: "uint64 above MaxInt64", param: "u", value: uint64(math.MaxUint64), errText: "outside the 64-bit integer range"},
		{name: "uint64 in range", param: "m", value: uint64(5), want: 5},
		{name: "above maximum", param: "m", value: float64(101), errText: "must be at most 100"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv, err := tool.Invoke(map[string]any{tt.param: tt.value})
			if tt.errText != "" {
				if !errors.Is(err, ErrInvalidParameters) || !strings.Contains(err.Error(), tt.errText) {
					t.Fatalf("%s=%v: got %v (params %v), want ErrInvalidParameters saying %q", tt.param, tt.value, err, paramsOf(inv), tt.errText)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := inv.Params[tt.param]; got != tt.want {
				t.Errorf("%s=%v: got %#v, want %d", tt.param, tt.value, got, tt.want)
			}
		})
	}
}

func paramsOf(inv *Invocation) map[string]any {
	if inv == nil {
		return nil
	}
	return inv.Params
}

func TestDetectSignals(t *testing.T) {
	c := loadDefault(t)
	out := `  # kubernetes_deployment.web must be replaced
-/+ resource "kubernetes_deployment" "web" {
      ~ metadata {
          ~ labels = { # forces replacement
Plan: 1 to add, 0 to change, 1 to destroy.`
	got := map[string]bool{}
	for _, m := range c.DetectSignals(out) {
		got[m.Name] = true
	}
	for _, want := range []string{"forces-replacement", "must-be-replaced", "destroy-count"} {
		if !got[want] {
			t.Errorf("signal %s not found in %v", want, got)
		}
	}
	if s := c.DetectSignals("Plan: 1 to add, 0 to change, 0 to destroy."); len(s) != 0 {
		t.Errorf("clean plan flagged: %v", s)
	}
}

func FuzzDecode(f *testing.F) {
	data, err := os.ReadFile(defaultPolicyPath)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add([]byte("apiVersion: x\nspec: {tools: [{name: 1}]}"))
	f.Add([]byte("{"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Decode(b)
		if err != nil {
			return
		}
		// Validation and compilation must never panic on whatever decoded.
		_, _ = Compile(p, "fuzz")
	})
}

func TestLoadWithoutAdmissionRules(t *testing.T) {
	c, err := LoadFile(defaultPolicyPath, WithoutAdmissionRules())
	if err != nil {
		t.Fatal(err)
	}
	if c.Rules != nil {
		t.Error("rules were compiled")
	}
	if _, err := c.Tool("terraform_apply"); err != nil {
		t.Error(err)
	}
	// Everything but the CEL is still validated.
	if _, err := Load(mutateDefault(t, "    tier: read\n", "    tier: admin\n"), WithoutAdmissionRules()); err == nil {
		t.Error("an invalid policy loaded without its rules")
	}
}

// A Vault Enterprise / HCP Vault namespace is accepted as a path of names and kept as written.
func TestVaultNamespace(t *testing.T) {
	for _, ns := range []string{"admin", "admin/team-a", "a_b.c/d-e"} {
		p, err := Load(mutateDefault(t, "      vaultAudience: vault\n", "      vaultAudience: vault\n      vaultNamespace: "+ns+"\n"))
		if err != nil {
			t.Fatalf("%s: %v", ns, err)
		}
		if got := p.Spec.Sandbox.CredentialAgent.VaultNamespace; got != ns {
			t.Errorf("vaultNamespace %q, want %q", got, ns)
		}
	}
	for _, ns := range []string{"admin/", "/admin", "a//b", `"a b"`} {
		if _, err := Load(mutateDefault(t, "      vaultAudience: vault\n", "      vaultAudience: vault\n      vaultNamespace: "+ns+"\n")); err == nil {
			t.Errorf("%s: accepted", ns)
		}
	}
}

// TestTargetNamespaces: every namespace any tool may target, once each, sorted; the default policy's tools
// all target demo-app.
func TestTargetNamespaces(t *testing.T) {
	if got := loadDefault(t).TargetNamespaces(); !reflect.DeepEqual(got, []string{"demo-app"}) {
		t.Errorf("default policy: %v, want [demo-app]", got)
	}
	p := &Policy{Spec: Spec{Tools: []Tool{
		{Name: "a", Namespaces: []string{"team-b", "team-a"}},
		{Name: "b", Namespaces: []string{"team-a"}},
		{Name: "c", Namespaces: []string{"apps"}},
	}}}
	if got := p.TargetNamespaces(); !reflect.DeepEqual(got, []string{"apps", "team-a", "team-b"}) {
		t.Errorf("TargetNamespaces = %v", got)
	}
}
