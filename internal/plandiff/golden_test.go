package plandiff

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/screen"
)

func reportOf(t *testing.T, path string) *Report {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	return Diff(p)
}

// checkGolden compares got with testdata/name, or rewrites it under -update.
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update creates it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("the screen differs from %s (go test -update to accept, then review the diff):\n%s", path, got)
	}
}

// TestApprovalScreenGolden pins what an approver reads for four plans: a real replacement, an ordinary
// attribute update, the incident (a deployment made privileged, root, with the node's state directory
// mounted and its command changed, which the old screen showed as "update kubernetes_deployment.web" and
// nothing more), and a long plan of 30 resources as the pager shows it, 40 rows a page.
func TestApprovalScreenGolden(t *testing.T) {
	tests := []struct {
		name, plan string
		pageRows   int // 0: not paged
	}{
		{"replace", replaceFixture, 0},
		{"update", "testdata/plan-update.json", 0},
		{"incident", "testdata/plan-incident.json", 0},
		{"long", "testdata/plan-long.json", 40},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := reportOf(t, tt.plan)
			var text bytes.Buffer
			if err := r.WriteText(&text); err != nil {
				t.Fatal(err)
			}
			got := text.Bytes()
			if tt.pageRows > 0 {
				var paged bytes.Buffer
				p := &screen.Pager{Out: &paged, Rows: tt.pageRows, Next: func() error {
					paged.WriteString("\n") // the terminal echoes the Enter typed
					return nil
				}}
				if err := p.Page("", text.String()); err != nil {
					t.Fatal(err)
				}
				got = paged.Bytes()
			}
			checkGolden(t, tt.name+".golden.txt", got)
		})
	}
}

// TestReportJSONGolden pins the -o json form of the incident: the same flags and attributes as the text.
func TestReportJSONGolden(t *testing.T) {
	r := reportOf(t, "testdata/plan-incident.json")
	got, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "incident.golden.json", append(got, '\n'))
}
