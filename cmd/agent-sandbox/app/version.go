package app

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/cli"
)

// version, commit and commitTime override what the build info reports. Release builds set them with
//
//	-ldflags "-X github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app.version=v1.2.3
//	          -X github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app.commit=<full SHA>
//	          -X github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app.commitTime=<RFC 3339>"
//
// (make build sets the version from git describe; make release sets all three). Release builds run with
// -buildvcs=false so that the binary does not depend on the state of the work tree, which is why the commit
// is stamped explicitly. `go install github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox@v1.2.3` needs
// none of them: the module version is in the build info.
var version, commit, commitTime = "", "", ""

// VersionInfo says which build is running.
type VersionInfo struct {
	// Version is the ldflags override, else the main module's version from the build info (v1.2.3 for
	// `go install ...@v1.2.3`, a pseudo-version for a commit), else "devel".
	Version string `json:"version"`
	// Commit and CommitTime come from the build info's VCS stamp (a build inside a git checkout without
	// -buildvcs=false); Modified says the work tree had uncommitted changes.
	Commit     string `json:"commit,omitempty"`
	CommitTime string `json:"commit_time,omitempty"`
	Modified   bool   `json:"modified,omitempty"`
	GoVersion  string `json:"go_version"`
	Platform   string `json:"platform"`
}

// String is the one line `agent-sandbox version` and `--version` print.
func (v VersionInfo) String() string {
	var extra []string
	if v.Commit != "" {
		c := v.Commit
		if len(c) > 12 {
			c = c[:12]
		}
		if v.Modified {
			c += "-dirty"
		}
		extra = append(extra, "commit "+c)
	}
	if v.CommitTime != "" {
		extra = append(extra, v.CommitTime)
	}
	extra = append(extra, v.GoVersion, v.Platform)
	return fmt.Sprintf("agent-sandbox %s (%s)", v.Version, strings.Join(extra, ", "))
}

// versionInfo describes this binary.
func versionInfo() VersionInfo {
	bi, _ := debug.ReadBuildInfo()
	return buildVersion(bi, stamp{Version: version, Commit: commit, CommitTime: commitTime})
}

// stamp is what -ldflags -X set; an empty field leaves the build info's value.
type stamp struct{ Version, Commit, CommitTime string }

// buildVersion derives the version from the build info (nil when the binary has none) and the ldflags
// stamp.
func buildVersion(bi *debug.BuildInfo, override stamp) VersionInfo {
	v := VersionInfo{Version: "devel", GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi != nil {
		if bi.GoVersion != "" {
			v.GoVersion = bi.GoVersion
		}
		// "(devel)" is what `go build` in a checkout reports; it says nothing the fallback does not.
		if mv := bi.Main.Version; mv != "" && mv != "(devel)" {
			v.Version = mv
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Commit = s.Value
			case "vcs.time":
				v.CommitTime = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	if override.Version != "" {
		v.Version = override.Version
	}
	if override.Commit != "" {
		// An explicit commit replaces the VCS stamp as a whole: its modified flag described another build.
		v.Commit, v.Modified = override.Commit, false
	}
	if override.CommitTime != "" {
		v.CommitTime = override.CommitTime
	}
	return v
}

func newVersionCommand(streams cli.IO) *cobra.Command {
	var output cli.OutputFlag
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the agent-sandbox version (also: agent-sandbox --version)",
		Long: `Print the version of this binary: the version it was released as (set at build time, or the module
version of a 'go install ...@VERSION' build), the git commit it was built from when known, and the Go
version and platform. -o json prints the same as an object with the fields version, commit, commit_time,
modified, go_version and platform.`,
		Args: cli.Usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			// -o "" has always printed the text.
			if output.Output == "" {
				output.Output = "text"
			}
			if err := output.Validate(); err != nil {
				return cli.UsageError{Err: err}
			}
			v := versionInfo()
			if output.JSON() {
				return cli.WriteJSON(streams.Out, v)
			}
			_, err := fmt.Fprintln(streams.Out, v)
			return err
		},
	}
	output.Bind(cmd)
	return cmd
}
