package cel

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func rule(i int, name, expr string) Rule {
	return Rule{Path: fmt.Sprintf("%s[%d]", DefaultRulesPath, i), Name: name, Expression: expr, Message: "m"}
}

func TestCompileCollectsAllErrors(t *testing.T) {
	rules := []Rule{
		rule(0, "ok", "kind == 'Job'"),
		rule(1, "syntax", "object.spec.(("),
		rule(2, "not-bool", "object.spec"),
		rule(3, "ok", "operation == 'CREATE'"),
	}
	p, err := Compile(rules, "v1")
	if p != nil {
		t.Errorf("Compile returned a program despite errors")
	}
	var ce *CompileError
	if !errors.As(err, &ce) {
		t.Fatalf("want *CompileError, got %T: %v", err, err)
	}
	var gotPaths []string
	for _, fe := range ce.Errs {
		gotPaths = append(gotPaths, fe.Path)
		if strings.ContainsAny(fe.Detail, "\n\r") {
			t.Errorf("%s: detail spans lines: %q", fe.Path, fe.Detail)
		}
	}
	wantPaths := []string{
		"spec.admissionRules[1].expression",
		"spec.admissionRules[2].expression",
		"spec.admissionRules[3].name",
	}
	if !slices.Equal(gotPaths, wantPaths) {
		t.Fatalf("error paths = %q, want %q", gotPaths, wantPaths)
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 3 {
		t.Fatalf("want one line per error, got %q", err.Error())
	}
	for i, want := range []string{
		"spec.admissionRules[1].expression: 1:",
		"spec.admissionRules[2].expression: must evaluate to bool, but evaluates to dyn",
		`spec.admissionRules[3].name: duplicate rule name "ok" (first used at spec.admissionRules[0])`,
	} {
		if !strings.HasPrefix(lines[i], want) {
			t.Errorf("line %d = %q, want prefix %q", i, lines[i], want)
		}
	}
	var fe FieldError
	if !errors.As(err, &fe) || fe.Path != wantPaths[0] {
		t.Errorf("errors.As(FieldError) = %v, want the first error", fe)
	}
}

func TestCompileRuleChecks(t *testing.T) {
	tests := []struct {
		name string
		rule Rule
		want string // error prefix; empty for success
	}{
		{"valid", Rule{Path: "r", Name: "n", Expression: "podSpec.?hostPID.orValue(false) == false"}, ""},
		{"extension libraries", Rule{Path: "r", Name: "n", Expression: `
			'a,b'.split(',').size() == 2 && sets.contains([1, 2], [1]) &&
			[3, 1].sortBy(x, x) == [1, 3] && base64.encode(b'x') == 'eA==' &&
			{'a': 1}.all(k, v, k == 'a' && v == 1)`}, ""},
		{"empty name", Rule{Path: "r", Name: " ", Expression: "true"}, "r.name: must not be empty"},
		{"empty expression", Rule{Path: "r", Name: "n"}, "r.expression: must not be empty"},
		{"multi-line message", Rule{Path: "r", Name: "n", Expression: "true", Message: "a\nb"}, "r.message: must be a single line"},
		{"unknown variable", Rule{Path: "r", Name: "n", Expression: "request.user == 'x'"}, "r.expression: 1:1: undeclared reference to 'request'"},
		{"string output", Rule{Path: "r", Name: "n", Expression: "kind"}, "r.expression: must evaluate to bool, but evaluates to string"},
		{"type error", Rule{Path: "r", Name: "n", Expression: "kind == 1"}, "r.expression: 1:6: found no matching overload"},
		{"bad regex literal", Rule{Path: "r", Name: "n", Expression: "kind.matches('(')"}, "r.expression:"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Compile([]Rule{tc.rule}, "v")
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)):
				t.Fatalf("error = %v, want prefix %q", err, tc.want)
			}
		})
	}
}

func TestCompileVersionAndRules(t *testing.T) {
	rules := []Rule{rule(0, "a", "true"), rule(1, "b", "false")}
	p, err := Compile(rules, "policy-7")
	if err != nil {
		t.Fatal(err)
	}
	if p.Version() != "policy-7" {
		t.Errorf("Version() = %q", p.Version())
	}
	if got := p.Rules(); !slices.Equal(got, rules) {
		t.Errorf("Rules() = %+v, want %+v", got, rules)
	}
}

func TestParseRulesRejectsUnknownKeys(t *testing.T) {
	if _, err := parseRules("- name: a\n  expresion: 'true'\n", "p"); err == nil {
		t.Fatal("want an error for a misspelt key")
	}
}
