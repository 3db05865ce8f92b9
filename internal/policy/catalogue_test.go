package policy

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestDefaultHintsFollowTheTier(t *testing.T) {
	c := loadDefault(t)
	for _, tc := range []struct {
		tool                                      string
		readOnly, destructive, idempotent, openWd bool
	}{
		{"k8s_get_pod_status", true, false, true, false},
		// A plan saves a plan and records it: not read-only, though it changes nothing it manages.
		{"terraform_plan", false, false, false, false},
		{"terraform_apply", false, true, false, false},
	} {
		tl, err := c.Tool(tc.tool)
		if err != nil {
			t.Fatal(err)
		}
		h := tl.Hints
		if Is(h.ReadOnly) != tc.readOnly || Is(h.Destructive) != tc.destructive || Is(h.Idempotent) != tc.idempotent || Is(h.OpenWorld) != tc.openWd {
			t.Errorf("%s hints: readOnly=%v destructive=%v idempotent=%v openWorld=%v", tc.tool, Is(h.ReadOnly), Is(h.Destructive), Is(h.Idempotent), Is(h.OpenWorld))
		}
	}
}

func TestInputSchemaCarriesThePolicy(t *testing.T) {
	c := loadDefault(t)
	ps, _ := c.Tool("k8s_get_pod_status")
	s := ps.InputSchema(nil)
	props := s["properties"].(map[string]any)
	ns := props["namespace"].(map[string]any)
	if ns["pattern"] != "^(?:[a-z0-9]([-a-z0-9]*[a-z0-9])?)$" || ns["maxLength"] != 63 {
		t.Errorf("namespace: pattern %v maxLength %v", ns["pattern"], ns["maxLength"])
	}
	if !reflect.DeepEqual(ns["enum"], []any{"demo-app"}) {
		t.Errorf("namespace enum = %v, want the tool's namespaces", ns["enum"])
	}
	if !reflect.DeepEqual(s["required"], []any{"namespace"}) || s["additionalProperties"] != false {
		t.Errorf("required %v additionalProperties %v", s["required"], s["additionalProperties"])
	}

	plan, _ := c.Tool("terraform_plan")
	s = plan.InputSchema([]string{"k8s-demo", "other", "../etc"})
	props = s["properties"].(map[string]any)
	if _, ok := props["source"]; ok {
		t.Error("the server-filled parameter source is shown to the agent")
	}
	// Only the folders the parameter's pattern admits are offered.
	if got := props["workspace"].(map[string]any)["enum"]; !reflect.DeepEqual(got, []any{"k8s-demo"}) {
		t.Errorf("workspace enum = %v", got)
	}
	if _, err := json.Marshal(s); err != nil {
		t.Fatal(err)
	}
}

func TestCheckAgentParams(t *testing.T) {
	c := loadDefault(t)
	plan, _ := c.Tool("terraform_plan")
	if _, err := plan.CheckAgentParams(map[string]any{"workspace": "k8s-demo"}); err != nil {
		t.Errorf("agent arguments without the server's: %v", err)
	}
	var pe *ParamError
	if _, err := plan.CheckAgentParams(map[string]any{"workspace": "k8s-demo", "source": "tfws-00000000000000000000"}); !errors.As(err, &pe) {
		t.Errorf("an agent naming the workspace ConfigMap: got %v, want a ParamError", err)
	}
	ps, _ := c.Tool("k8s_get_pod_status")
	if _, err := ps.CheckAgentParams(map[string]any{"namespace": "kube-system"}); !errors.Is(err, ErrNamespaceDenied) {
		t.Errorf("kube-system: got %v, want ErrNamespaceDenied", err)
	}
}

func TestCatalogueValidation(t *testing.T) {
	tests := []struct {
		name, from, to, want string
	}{
		{"read tool claiming to write", "    tier: read\n    scope: pod-reader\n", "    tier: read\n    hints: {readOnly: false}\n    scope: pod-reader\n", "hints.readOnly"},
		{"read tool with a writing credential", "      resources: [pods]\n      verbs: [get, list]", "      resources: [pods]\n      verbs: [get, list, delete]", "may only get, list and watch"},
		{"agent names the workspace ConfigMap", "      filledBy: workspace\n", "", "workspace.parameter"},
		{"unknown result kind", "result: {kind: terraform-apply}", "result: {kind: shell}", "result.kind"},
		{"json result without schema", "result: {kind: terraform-apply}", "result: {kind: json}", "result.schema"},
		{"result schema with an unknown keyword", "        required: [namespace, selector, pods, total, truncated]\n", "        requried: [namespace]\n", "keyword not allowed"},
		{"result schema claiming request_id", "          namespace: {type: string}\n", "          namespace: {type: string}\n          request_id: {type: string}\n", "request_id"},
		{"result too large", "result: {kind: terraform-apply}", "result: {kind: terraform-apply, maxBytes: 99999999}", "result.maxBytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(mutateDefault(t, tc.from, tc.to))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
}
