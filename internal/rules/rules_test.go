package rules_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/rules"
	"github.com/agent-sandbox/agent-sandbox/internal/service"
)

// TestRegistry: every ID constant of the package is registered once, with a doc and an invariant the README
// has; the policy's rules do not reuse a Go-side rule's ID.
func TestRegistry(t *testing.T) {
	seen := map[rules.ID]bool{}
	for _, r := range rules.All {
		if seen[r.ID] {
			t.Errorf("rule %s is registered twice", r.ID)
		}
		seen[r.ID] = true
		if r.Doc == "" || strings.Contains(r.Doc, "\n") {
			t.Errorf("rule %s: the doc must be one line", r.ID)
		}
		if _, ok := rules.Invariants[r.Invariant]; !ok {
			t.Errorf("rule %s serves invariant %d, which README.md does not have", r.ID, r.Invariant)
		}
	}
	file, err := parser.ParseFile(token.NewFileSet(), "rules.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range file.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			v := s.(*ast.ValueSpec)
			if id, ok := v.Type.(*ast.Ident); !ok || id.Name != "ID" {
				continue
			}
			val, err := strconv.Unquote(v.Values[0].(*ast.BasicLit).Value)
			if err != nil {
				t.Fatal(err)
			}
			n++
			if !seen[rules.ID(val)] {
				t.Errorf("constant %s (%q) is not in All", v.Names[0].Name, val)
			}
		}
	}
	if n != len(rules.All) {
		t.Errorf("%d ID constants, %d registered rules", n, len(rules.All))
	}

	p, err := policy.LoadFile("../../policy/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	merged := rules.WithPolicy(p.Policy)
	if len(merged) != len(rules.All)+len(p.Spec.AdmissionRules)+len(p.Spec.PlanRules) {
		t.Errorf("WithPolicy gives %d rules", len(merged))
	}
	// One name, one invariant, enforced in two places: the webhook refuses the pods/ephemeralcontainers
	// subresource, the policy's CEL rule a Pod that carries ephemeral containers.
	shared := map[rules.ID]bool{rules.NoEphemeralContainers: true}
	for _, r := range merged[len(rules.All):] {
		if seen[r.ID] && !shared[r.ID] {
			t.Errorf("the policy's rule %s has the ID of a Go-side rule", r.ID)
		}
		seen[r.ID] = true
	}
}

// TestGuardrailKinds: the guardrails' IDs are the MCP server's error kinds.
func TestGuardrailKinds(t *testing.T) {
	if string(rules.RateLimited) != string(service.KindRateLimited) || string(rules.ApprovalRequiredCall) != string(service.KindApprovalRequired) {
		t.Error("the guardrail IDs differ from internal/service's kinds")
	}
}

// TestWebhookNamesRulesByID: no refusal in the webhook names its rule with a string literal; each passes a
// rules.ID (a registered constant, or a name from the policy or a table).
func TestWebhookNamesRulesByID(t *testing.T) {
	calls := 0
	eachCall(t, "../../webhook/*.go", []string{"deny", "checkHead", "sameMetadata"}, func(fset *token.FileSet, name string, call *ast.CallExpr) {
		if len(call.Args) == 0 {
			return
		}
		calls++
		switch a := call.Args[0].(type) {
		case *ast.BasicLit:
			t.Errorf("%s: %s names its rule with the literal %s; use a rules constant", fset.Position(a.Pos()), name, a.Value)
		case *ast.SelectorExpr:
			if x, ok := a.X.(*ast.Ident); ok && x.Name == "rules" {
				if _, ok := rules.Lookup(rules.All, rules.ID(constValue(t, a.Sel.Name))); !ok {
					t.Errorf("%s: rules.%s is not registered", fset.Position(a.Pos()), a.Sel.Name)
				}
			}
		}
	})
	if calls < 100 {
		t.Errorf("found only %d refusals in webhook/*.go: has deny been renamed?", calls)
	}
}

// eachCall calls f for every call of a function named by a plain identifier among names in the Go
// files (tests left out) that glob matches.
func eachCall(t *testing.T, glob string, names []string, f func(fset *token.FileSet, name string, call *ast.CallExpr)) {
	t.Helper()
	files, err := filepath.Glob(glob)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no file matches %s", glob)
	}
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			if call, ok := n.(*ast.CallExpr); ok {
				if fn, ok := call.Fun.(*ast.Ident); ok && slices.Contains(names, fn.Name) {
					f(fset, fn.Name, call)
				}
			}
			return true
		})
	}
}

var constValues map[string]string

// constValue is the value of the ID constant name in rules.go.
func constValue(t *testing.T, name string) string {
	if constValues == nil {
		constValues = map[string]string{}
		file, err := parser.ParseFile(token.NewFileSet(), "rules.go", nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
				for _, s := range g.Specs {
					v := s.(*ast.ValueSpec)
					if lit, ok := v.Values[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						constValues[v.Names[0].Name], _ = strconv.Unquote(lit.Value)
					}
				}
			}
		}
	}
	return constValues[name]
}

// TestInvariantsAreREADMEs: the invariants' numbers and names are README.md's list.
func TestInvariantsAreREADMEs(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	found := regexp.MustCompile(`(?m)^(\d+)\. \*\*([^*]+)\*\*`).FindAllStringSubmatch(string(readme), -1)
	if len(found) != len(rules.Invariants) {
		t.Fatalf("README.md lists %d invariants, the registry %d", len(found), len(rules.Invariants))
	}
	for _, m := range found {
		n, _ := strconv.Atoi(m[1])
		if name := rules.Invariants[n]; name == "" || !strings.HasPrefix(m[2], name) {
			t.Errorf("README.md's invariant %d is %q, the registry's %q", n, m[2], name)
		}
	}
}
