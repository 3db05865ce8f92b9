package toolrun

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/policy"
)

// The testdata plans are `terraform show -json` (Terraform 1.11.4, provider 1.13.4) of terraform/k8s-demo:
// the first plan, a plan right after applying it, and the plan after the demo's one-line edit.
func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestParsePlanJSONDemo(t *testing.T) {
	create, err := ParsePlanJSON(readTestdata(t, "plan-create.json"))
	if err != nil {
		t.Fatal(err)
	}
	if create.Summary != (PlanSummary{Add: 2}) || create.NoChanges || len(create.Changes) != 2 {
		t.Errorf("create: %+v", create)
	}
	for _, c := range create.Changes {
		if !reflect.DeepEqual(c.Actions, []string{"create"}) || c.Replace {
			t.Errorf("create change %+v", c)
		}
	}

	none, err := ParsePlanJSON(readTestdata(t, "plan-nochange.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !none.NoChanges || none.Summary != (PlanSummary{}) || len(none.Changes) != 0 || none.Changes == nil {
		t.Errorf("no change: %+v", none)
	}

	replace, err := ParsePlanJSON(readTestdata(t, "plan-replace.json"))
	if err != nil {
		t.Fatal(err)
	}
	if replace.Summary != (PlanSummary{Add: 1, Destroy: 1, Replace: 1}) || replace.NoChanges || len(replace.Changes) != 1 {
		t.Fatalf("replace: %+v", replace)
	}
	c := replace.Changes[0]
	want := ResourceChange{
		Address: "kubernetes_deployment.web", Type: "kubernetes_deployment", Name: "web",
		Actions: []string{"delete", "create"}, Replace: true, ActionReason: "replace_because_cannot_update",
	}
	paths := c.ReplacePaths
	c.ReplacePaths = nil
	if !reflect.DeepEqual(c, want) {
		t.Errorf("replace change:\n got %+v\nwant %+v", c, want)
	}
	if len(paths) != 1 || fmtPath(paths[0]) != "spec.0.selector.0.match_labels" {
		t.Errorf("replace paths %v", paths)
	}
}

func fmtPath(p []any) string {
	parts := make([]string, len(p))
	for i, x := range p {
		parts[i] = strings.Trim(strings.TrimSpace(toString(x)), `"`)
	}
	return strings.Join(parts, ".")
}

func toString(x any) string {
	switch v := x.(type) {
	case string:
		return v
	case interface{ String() string }:
		return v.String()
	}
	return "?"
}

// The plan text of the demo's edit carries the destructive signals the policy makes the server look for.
func TestDemoPlanTextTriggersPolicySignals(t *testing.T) {
	pol, err := policy.LoadFile("../../policy/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, m := range pol.DetectSignals(string(readTestdata(t, "plan-replace.txt"))) {
		found[m.Name] = true
	}
	for _, want := range []string{"forces-replacement", "must-be-replaced", "destroy-count"} {
		if !found[want] {
			t.Errorf("signal %s not found in the demo's plan text (found %v)", want, found)
		}
	}
}

func TestParsePlanJSONActions(t *testing.T) {
	doc := `{"format_version":"1.2","resource_changes":[
	  {"address":"a.create","mode":"managed","type":"a","name":"create","change":{"actions":["create"]}},
	  {"address":"a.update","mode":"managed","type":"a","name":"update","change":{"actions":["update"]}},
	  {"address":"a.delete","mode":"managed","type":"a","name":"delete","change":{"actions":["delete"]}},
	  {"address":"a.cbd","mode":"managed","type":"a","name":"cbd","change":{"actions":["create","delete"],"replace_paths":[["x",3]]}},
	  {"address":"a.same","mode":"managed","type":"a","name":"same","change":{"actions":["no-op"]}},
	  {"address":"data.a.read","mode":"data","type":"a","name":"read","change":{"actions":["read"]}}
	]}`
	got, err := ParsePlanJSON([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if got.Summary != (PlanSummary{Add: 2, Change: 1, Destroy: 2, Replace: 1}) || got.NoChanges {
		t.Errorf("summary %+v", got)
	}
	var addrs []string
	for _, c := range got.Changes {
		addrs = append(addrs, c.Address)
	}
	if strings.Join(addrs, " ") != "a.create a.update a.delete a.cbd data.a.read" {
		t.Errorf("changes %v", addrs)
	}
	if !got.Changes[3].Replace || fmtPath(got.Changes[3].ReplacePaths[0]) != "x.3" {
		t.Errorf("create-before-destroy: %+v", got.Changes[3])
	}

	// A data source read alone changes nothing; an output change alone does.
	onlyRead := `{"format_version":"1.2","resource_changes":[{"address":"data.a.b","mode":"data","change":{"actions":["read"]}}]}`
	if got, err := ParsePlanJSON([]byte(onlyRead)); err != nil || !got.NoChanges {
		t.Errorf("only a read: %+v %v", got, err)
	}
	onlyOutput := `{"format_version":"1.2","output_changes":{"o":{"actions":["update"]}}}`
	if got, err := ParsePlanJSON([]byte(onlyOutput)); err != nil || got.NoChanges {
		t.Errorf("only an output: %+v %v", got, err)
	}
	for _, bad := range []string{"", "{", `{"resource_changes":[]}`, "[]"} {
		if _, err := ParsePlanJSON([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
