package plandiff

import (
	"fmt"
	"strings"
	"testing"
)

// planOf parses a show -json document holding the given resource_changes entries.
func planOf(t *testing.T, changes ...string) *Plan {
	t.Helper()
	doc := `{"format_version":"1.2","terraform_version":"1.11.4","resource_changes":[` + strings.Join(changes, ",") + `]}`
	p, err := Parse([]byte(doc))
	if err != nil {
		t.Fatalf("Parse: %v\n%s", err, doc)
	}
	return p
}

// rc is one resource_changes entry of type kubernetes_deployment.
func rc(actions, change string) string {
	return `{"address":"kubernetes_deployment.web","mode":"managed","type":"kubernetes_deployment","name":"web",
		"change":{"actions":` + actions + `,` + change + `}}`
}

func attrLines(r *Report) []string {
	var out []string
	for _, res := range r.Resources {
		for _, a := range res.Attributes {
			out = append(out, fmt.Sprintf("%s %s: %s -> %s", a.Change, a.Path, a.Before, a.After))
		}
	}
	return out
}

func TestDiffAttributes(t *testing.T) {
	long := strings.Repeat("x", MaxStringBytes+10)
	hugeShown := "[" + strings.Repeat(`"`+strings.Repeat("y", 2000)+`", `, 40) + `"z"]`
	tests := []struct {
		name    string
		actions string
		change  string
		want    []string
	}{
		{
			name:    "nested block attribute",
			actions: `["update"]`,
			change:  `"before":{"spec":[{"template":[{"spec":[{"container":[{"security_context":[{"privileged":false}]}]}]}]}]},"after":{"spec":[{"template":[{"spec":[{"container":[{"security_context":[{"privileged":true}]}]}]}]}]}`,
			want:    []string{"update spec[0].template[0].spec[0].container[0].security_context[0].privileged: false -> true"},
		},
		{
			name:    "map keys sorted, quoted when not identifiers",
			actions: `["update"]`,
			change:  `"before":{"labels":{"b":"1","app.kubernetes.io/name":"x"}},"after":{"labels":{"b":"2","app.kubernetes.io/name":"y","a":"new"}}`,
			want: []string{
				`add labels.a: (none) -> "new"`,
				`update labels["app.kubernetes.io/name"]: "x" -> "y"`,
				`update labels.b: "1" -> "2"`,
			},
		},
		{
			name:    "list elements added and removed, index-wise",
			actions: `["update"]`,
			change:  `"before":{"command":["a","b","c"],"args":["x"]},"after":{"command":["a","B"],"args":["x","y"]}`,
			want: []string{
				`add args[1]: (none) -> "y"`,
				`update command[1]: "b" -> "B"`,
				`remove command[2]: "c" -> (none)`,
			},
		},
		{
			name:    "a block added to a list shows its values, not its empty sub-blocks",
			actions: `["update"]`,
			change:  `"before":{"volume":[{"name":"tmp","host_path":[],"nfs":[]}]},"after":{"volume":[{"name":"tmp","host_path":[],"nfs":[]},{"name":"node","host_path":[{"path":"/","type":null}],"nfs":[]}]}`,
			want: []string{
				`add volume[1].host_path[0].path: (none) -> "/"`,
				`add volume[1].name: (none) -> "node"`,
			},
		},
		{
			name:    "empty against null on a key both sides have",
			actions: `["update"]`,
			change:  `"before":{"annotations":{},"args":[]},"after":{"annotations":null,"args":null}`,
			want:    []string{"remove annotations: {} -> null", "remove args: [] -> null"},
		},
		{
			name:    "known after apply: a leaf, a value missing from after, a block that had values",
			actions: `["update"]`,
			change: `"before":{"uid":"u1","image":"a","strategy":[{"type":"RollingUpdate","rolling_update":[{"max_surge":"25%"}]}]},
				"after":{"image":"a"},"after_unknown":{"uid":true,"strategy":true,"self_link":true}`,
			want: []string{
				`update self_link: (none) -> (known after apply)`,
				`update strategy[0].rolling_update[0].max_surge: "25%" -> (known after apply)`,
				`update strategy[0].type: "RollingUpdate" -> (known after apply)`,
				`update uid: "u1" -> (known after apply)`,
			},
		},
		{
			name:    "known after apply inside a list",
			actions: `["update"]`,
			change:  `"before":{"command":["a","b"]},"after":{"command":["a",null]},"after_unknown":{"command":[false,true]}`,
			want:    []string{`update command[1]: "b" -> (known after apply)`},
		},
		{
			name:    "sensitive values are masked and compared whole",
			actions: `["update"]`,
			change: `"before":{"data":{"password":"old","user":"u"},"token":"t","same":"s","note":"n"},"after":{"data":{"password":"new","user":"u"},"token":"t2","same":"s","note":"n2"},
				"before_sensitive":{"data":true,"token":true,"same":true},"after_sensitive":{"data":true,"token":true,"same":true,"note":true}`,
			want: []string{
				`update data: (sensitive) -> (sensitive)`,
				`update note: "n" -> (sensitive)`,
				`update token: (sensitive) -> (sensitive)`,
			},
		},
		{
			name:    "a whole sensitive resource",
			actions: `["update"]`,
			change:  `"before":{"a":"1"},"after":{"a":"2"},"before_sensitive":true,"after_sensitive":true`,
			want:    []string{`update (whole resource): (sensitive) -> (sensitive)`},
		},
		{
			name:    "create: every attribute with a value after, unknowns included",
			actions: `["create"]`,
			change:  `"before":null,"after":{"name":"web","replicas":2,"paused":false,"ratio":0.5,"nothing":null,"blocks":[],"labels":{}},"after_unknown":{"id":true}`,
			want: []string{
				`update id: (none) -> (known after apply)`,
				`add name: (none) -> "web"`,
				`add paused: (none) -> false`,
				`add ratio: (none) -> 0.5`,
				`add replicas: (none) -> 2`,
			},
		},
		{
			name:    "delete: every attribute that had a value",
			actions: `["delete"]`,
			change:  `"before":{"name":"web","spec":[{"replicas":2,"paused":null}]},"after":null`,
			want:    []string{`remove name: "web" -> (none)`, `remove spec[0].replicas: 2 -> (none)`},
		},
		{
			name:    "type change shown whole",
			actions: `["update"]`,
			change:  `"before":{"port":"8080"},"after":{"port":[{"number":8080}]}`,
			want:    []string{`update port: "8080" -> [{number = 8080}]`},
		},
		{
			name:    "a huge string is cut and the cut said",
			actions: `["update"]`,
			change:  `"before":{"script":"short"},"after":{"script":"` + long + `"}`,
			want:    []string{`update script: "short" -> "` + long[:MaxStringBytes] + `" (… 10 more bytes)`},
		},
		{
			name:    "a huge value shown whole is cut and the cut said",
			actions: `["update"]`,
			change:  `"before":{"port":"p"},"after":{"port":[` + strings.Repeat(`"`+strings.Repeat("y", 2000)+`",`, 40) + `"z"]}`,
			want:    []string{`update port: "p" -> ` + hugeShown[:maxValueBytes] + fmt.Sprintf(" (… %d more bytes)", len(hugeShown)-maxValueBytes)},
		},
		{
			name:    "control characters and look-alikes are escaped and named",
			actions: `["update"]`,
			change:  `"before":{"labels":{"tr\u0430ck":"a"},"name":"web"},"after":{"labels":{"tr\u0430ck":"a\u001b[2J"},"name":"w\u0435b\u202e"}`,
			want: []string{
				`update labels["tr\u0430ck"] [non-ASCII: U+0430 CYRILLIC SMALL LETTER A]: "a" -> "a\u001b[2J"`,
				`update name: "web" -> "w\u0435b\u202e" [non-ASCII: U+0435 CYRILLIC SMALL LETTER IE, U+202E RIGHT-TO-LEFT OVERRIDE]`,
			},
		},
		{
			name:    "nothing differs",
			actions: `["update"]`,
			change:  `"before":{"a":1,"b":[{"c":"d"}]},"after":{"a":1,"b":[{"c":"d"}]}`,
			want:    nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := attrLines(Diff(planOf(t, rc(tt.actions, tt.change))))
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("attributes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// TestDiffSkipsNoOpsAndCounts: no-ops are left out; the counts are terraform plan's (managed resources
// only, a replacement is one to add and one to destroy).
func TestDiffSkipsNoOpsAndCounts(t *testing.T) {
	mk := func(addr, mode, actions string) string {
		return `{"address":"` + addr + `","mode":"` + mode + `","type":"kubernetes_config_map","name":"x","change":{"actions":` + actions + `,"before":null,"after":null}}`
	}
	r := Diff(planOf(t,
		mk("a.noop", "managed", `["no-op"]`), mk("a.create", "managed", `["create"]`), mk("a.update", "managed", `["update"]`),
		mk("a.delete", "managed", `["delete"]`), mk("a.replace", "managed", `["create","delete"]`), mk("data.a.read", "data", `["read"]`)))
	if r.Summary != (Summary{Add: 2, Change: 1, Destroy: 2, Replace: 1}) {
		t.Errorf("summary = %+v", r.Summary)
	}
	var addrs []string
	for _, res := range r.Resources {
		addrs = append(addrs, res.Address)
	}
	if got := strings.Join(addrs, " "); got != "a.create a.update a.delete a.replace data.a.read" {
		t.Errorf("resources = %s", got)
	}
	for _, real := range []struct {
		path string
		want Summary
	}{
		{replaceFixture, Summary{Add: 1, Destroy: 1, Replace: 1}},
		{"../toolrun/testdata/plan-create.json", Summary{Add: 2}},
		{"../toolrun/testdata/plan-nochange.json", Summary{}},
	} {
		if got := reportOf(t, real.path).Summary; got != real.want {
			t.Errorf("%s: summary %+v, want %+v", real.path, got, real.want)
		}
	}
}

// TestDiffIsDeterministic: the same plan gives the same screen, byte for byte, whatever Go's map order.
func TestDiffIsDeterministic(t *testing.T) {
	var first string
	for i := range 20 {
		var b strings.Builder
		if err := reportOf(t, "testdata/plan-incident.json").WriteText(&b); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = b.String()
		} else if b.String() != first {
			t.Fatal("two renderings of one plan differ")
		}
	}
}

func TestPathString(t *testing.T) {
	tests := []struct {
		path Path
		want string
	}{
		{Path{"spec", int64(0), "selector", 0, "match_labels"}, "spec[0].selector[0].match_labels"},
		{Path{"labels", "app.kubernetes.io/name"}, `labels["app.kubernetes.io/name"]`},
		{Path{"data", `a"b\c`}, `data["a\"b\\c"]`},
		{Path{"w\u0435b"}, `["w\u0435b"] [non-ASCII: U+0435 CYRILLIC SMALL LETTER IE]`},
		{Path{"x", 1.5, true}, "x[1.5][true]"},
	}
	for _, tt := range tests {
		if got := tt.path.String(); got != tt.want {
			t.Errorf("%#v: %s, want %s", tt.path, got, tt.want)
		}
	}
}
