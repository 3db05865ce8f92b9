package corpus

import (
	"strings"
	"testing"
)

func TestApplyPatch(t *testing.T) {
	const old = "a\nb\nc\nd\ne\nf\ng\n"
	for _, tc := range []struct {
		name, patch, want, err string
	}{
		{"a line changed", "--- f\n+++ f\n@@ -2,3 +2,3 @@\n b\n-c\n+C\n d\n", "a\nb\nC\nd\ne\nf\ng\n", ""},
		{"a line added at the top", "--- f\n+++ f\n@@ -0,0 +1 @@\n+z\n", "z\na\nb\nc\nd\ne\nf\ng\n", ""},
		{"two hunks", "--- f\n+++ f\n@@ -1,2 +1,2 @@\n-a\n+A\n b\n@@ -6,2 +6,3 @@\n f\n g\n+h\n", "A\nb\nc\nd\ne\nf\ng\nh\n", ""},
		{"the last newline removed", "--- f\n+++ f\n@@ -7 +7 @@\n-g\n+g\n\\ No newline at end of file\n", "a\nb\nc\nd\ne\nf\ng", ""},
		// No fuzz: the demo moved on under the case, or the hunk names another line.
		{"context that is not there", "--- f\n+++ f\n@@ -2,3 +2,3 @@\n b\n-c\n+C\n x\n", "", `line 4 of the file is not "x"`},
		{"a hunk one line off", "--- f\n+++ f\n@@ -3,3 +3,3 @@\n b\n-c\n+C\n d\n", "", `line 3 of the file is not "b"`},
		{"a removed line that differs", "--- f\n+++ f\n@@ -3 +3 @@\n-x\n+C\n", "", `line 3 of the file is not "x"`},
		{"counts that lie", "--- f\n+++ f\n@@ -2,2 +2,2 @@\n b\n-c\n+C\n d\n", "", "its header says -2 +2 lines, it has -3 +3"},
		{"hunks out of order", "--- f\n+++ f\n@@ -5 +5 @@\n-e\n+E\n@@ -1 +1 @@\n-a\n+A\n", "", "out of order"},
		{"past the end", "--- f\n+++ f\n@@ -9 +9 @@\n-x\n+y\n", "", "past the end"},
		{"no header", "@@ -1 +1 @@\n-a\n+A\n", "", "not a unified diff"},
		{"a stray line", "--- f\n+++ f\n@@ -1 +1 @@\n-a\n*A\n", "", "not a context, removed or added line"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := applyPatch(old, tc.patch)
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("error: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("error %v, want one containing %q", err, tc.err)
			case got != tc.want:
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// A case whose patch no longer applies to the demo, or applies and changes nothing, does not load.
func TestHarmfulCaseChangeRefusesStaleAndEmptyPatches(t *testing.T) {
	h := HarmfulPlan{Files: map[string][]byte{"main.tf": []byte("a\nb\n"), "versions.tf": []byte("v\n")}}
	if err := h.change("main.tf.patch", []byte("--- main.tf\n+++ main.tf\n@@ -1 +1 @@\n-x\n+y\n")); err == nil || !strings.Contains(err.Error(), "does not apply to terraform/k8s-demo/main.tf") {
		t.Errorf("stale patch: %v", err)
	}
	if err := h.change("main.tf.patch", []byte("--- main.tf\n+++ main.tf\n@@ -1 +1 @@\n-a\n+a\n")); err == nil || !strings.Contains(err.Error(), "changes nothing") {
		t.Errorf("empty patch: %v", err)
	}
	if err := h.change("other.tf.patch", []byte("--- x\n+++ x\n")); err == nil || !strings.Contains(err.Error(), "has no other.tf") {
		t.Errorf("patch of a missing file: %v", err)
	}
	if err := h.change("versions.tf", []byte("w\n")); err == nil || !strings.Contains(err.Error(), "write the change as versions.tf.patch") {
		t.Errorf("a whole copy of a demo file: %v", err)
	}
	if err := h.change("main.tf.json", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if _, ok := h.Files["main.tf"]; ok {
		t.Error("main.tf.json did not stand in for main.tf")
	}
}
