package cases

import "testing"

// TestNamesAndRules: every case names the refusal it expects, and no two cases of a kind share a name (a
// report names each case by it, and a test by name runs one).
func TestNamesAndRules(t *testing.T) {
	seen := map[string]bool{}
	check := func(kind, name, rule string, ok bool) {
		t.Helper()
		if name == "" || rule == "" || !ok {
			t.Errorf("%s case %q: a name, a rule and what to change are all required (rule %q)", kind, name, rule)
		}
		if seen[kind+"/"+name] {
			t.Errorf("two %s cases are named %q", kind, name)
		}
		seen[kind+"/"+name] = true
	}
	for _, c := range Jobs() {
		check("job", c.Name, c.Rule, c.Mutate != nil && (c.Base == Submitted || c.Base == Injected) && c.Class != "")
	}
	for _, c := range Pods() {
		check("pod", c.Name, c.Rule, true)
	}
	for _, c := range Approvals() {
		check("approval", c.Name, c.Rule, c.Key == NoToken || c.Key == Trusted || c.Key == Untrusted || c.Key == Impostor)
	}
	for _, c := range JobChanges() {
		check("job change", c.Name, Immutable, (c.Patch != "") != (c.Update != nil) && (c.Patch == "") == (c.Body == ""))
	}
	for _, c := range PodChanges() {
		check("pod change", c.Name, Immutable, c.Patch != "" && c.Body != "")
	}
	if n := len(seen); n < 150 {
		t.Fatalf("only %d cases: is a list missing?", n)
	}
}
