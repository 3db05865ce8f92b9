package tfcheck

import (
	"os"
	"strings"
	"testing"
	"time"
)

// fuzzDeadline is how long one input may take; hostile input must be refused quickly.
const fuzzDeadline = 5 * time.Second

// seedCorpus adds the corpus files whose names pass keep, up to 64 KiB each (the fuzzer mutates
// them; the megabyte cases are covered by TestCorpus).
func seedCorpus(f *testing.F, keep func(name string) bool) {
	cases, err := Corpus("testdata")
	if err != nil {
		f.Fatal(err)
	}
	for _, c := range cases {
		for name, b := range c.Files {
			if keep(name) && len(b) <= 64<<10 {
				f.Add(b)
			}
		}
	}
}

func timed(t *testing.T, fn func()) {
	start := time.Now()
	// A hang would stall the fuzzer without a report; a panic from the timer makes it a crasher
	// that go test saves under testdata/fuzz.
	watchdog := time.AfterFunc(4*fuzzDeadline, func() { panic("fuzz input still running after " + (4 * fuzzDeadline).String()) })
	defer watchdog.Stop()
	fn()
	if d := time.Since(start); d > fuzzDeadline {
		t.Fatalf("took %v", d)
	}
}

// FuzzCheckHCL feeds native-syntax files (configuration, variables, lock file) to Check. It must
// never panic, and must finish quickly.
func FuzzCheckHCL(f *testing.F) {
	seedCorpus(f, func(n string) bool {
		return strings.HasSuffix(n, ".tf") || strings.HasSuffix(n, ".tfvars") || n == lockFileName
	})
	f.Add([]byte(strings.Repeat("!", 1000) + "x"))
	f.Add([]byte("a = \"%{if a}%{for x in y}${x}%{endfor}%{endif}\""))
	f.Fuzz(func(t *testing.T, src []byte) {
		timed(t, func() {
			for _, name := range []string{"main.tf", "a.tfvars", lockFileName} {
				files := map[string][]byte{name: src}
				if name != "main.tf" {
					files["main.tf"] = []byte(okTF)
				}
				if Check(files, testOpts) == nil {
					if found := nativeOracle(src); len(found) > 0 {
						t.Fatalf("accepted as %s, but hclsyntax.VisitAll finds %v in it", name, found)
					}
				}
			}
		})
	})
}

// FuzzCheckJSON feeds JSON-syntax files to Check.
func FuzzCheckJSON(f *testing.F) {
	seedCorpus(f, func(n string) bool { return strings.HasSuffix(n, ".json") })
	f.Add([]byte(`{"resource": {"kubernetes_pod": {"p": {"dynamic": {"x": {"for_each": "${var.a}", "content": {"b": "${x.value}"}}}}}}}`))
	f.Fuzz(func(t *testing.T, src []byte) {
		timed(t, func() {
			if Check(map[string][]byte{"main.tf.json": src}, testOpts) == nil {
				if found := jsonOracle(src); len(found) > 0 {
					t.Fatalf("accepted, but HCL's JSON decoder finds %v in it", found)
				}
			}
			_ = Check(map[string][]byte{"main.tf": []byte(okTF), "a.tfvars.json": src}, testOpts)
		})
	})
}

// FuzzCheckPlan feeds plan files to CheckPlan, seeded with real plans from testdata/plans.
func FuzzCheckPlan(f *testing.F) {
	entries, _ := os.ReadDir("testdata/plans")
	for _, e := range entries {
		if b, err := os.ReadFile("testdata/plans/" + e.Name()); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("PK\x05\x06" + strings.Repeat("\x00", 18)))
	f.Fuzz(func(t *testing.T, plan []byte) {
		timed(t, func() {
			_ = CheckPlan(plan, planOpts())
		})
	})
}
