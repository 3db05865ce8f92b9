package app

import (
	"encoding/json"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/cli"
)

// TestVersionFlag: --version and the version command print the same line; -o json the same facts.
func TestVersionFlag(t *testing.T) {
	code, flag, stderr := runCLI(t, "--version")
	if code != 0 || stderr != "" || !strings.HasPrefix(flag, "agent-sandbox ") || !strings.HasSuffix(flag, ")\n") {
		t.Fatalf("--version: exit %d, stdout %q, stderr %q", code, flag, stderr)
	}
	if code, cmd, _ := runCLI(t, "version"); code != 0 || cmd != flag {
		t.Errorf("version printed %q (exit %d), --version %q", cmd, code, flag)
	}
	code, out, _ := runCLI(t, "version", "-o", "json")
	var v VersionInfo
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil || v.Version == "" || v.GoVersion == "" || v.Platform == "" {
		t.Errorf("version -o json: exit %d, %v, %q", code, err, out)
	}
	if v.String()+"\n" != flag {
		t.Errorf("version -o json %+v does not match --version %q", v, flag)
	}
	if code, _, stderr := runCLI(t, "version", "-o", "yaml"); code != cli.ExitUsage || !strings.Contains(stderr, `-o "yaml": want text or json`) {
		t.Errorf("version -o yaml: exit %d, stderr %q", code, stderr)
	}
}

func TestBuildVersion(t *testing.T) {
	bi := &debug.BuildInfo{
		GoVersion: "go1.26.0",
		Main:      debug.Module{Path: "github.com/agent-sandbox/agent-sandbox", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
			{Key: "vcs.time", Value: "2026-12-01T10:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	for _, tc := range []struct {
		name     string
		bi       *debug.BuildInfo
		override stamp
		want     string
	}{
		{"go install @version", bi, stamp{}, "agent-sandbox v1.2.3 (commit 0123456789ab-dirty, 2026-12-01T10:00:00Z, go1.26.0, "},
		{"ldflags override", bi, stamp{Version: "v9.9.9"}, "agent-sandbox v9.9.9 (commit 0123456789ab-dirty, "},
		{"release build", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}},
			stamp{Version: "v1.0.0", Commit: "fedcba9876543210fedcba9876543210fedcba98", CommitTime: "2026-12-02T08:00:00Z"},
			"agent-sandbox v1.0.0 (commit fedcba987654, 2026-12-02T08:00:00Z, go1.26.0, "},
		{"release build over a VCS stamp", bi, stamp{Commit: "fedcba9876543210fedcba9876543210fedcba98"}, "agent-sandbox v1.2.3 (commit fedcba987654, 2026-12-01T10:00:00Z, "},
		{"go build in a checkout", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}}, stamp{}, "agent-sandbox devel (go1.26.0, "},
		{"no build info", nil, stamp{}, "agent-sandbox devel (go"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := buildVersion(tc.bi, tc.override).String(); !strings.HasPrefix(got, tc.want) {
				t.Errorf("got %q, want prefix %q", got, tc.want)
			}
		})
	}
}
