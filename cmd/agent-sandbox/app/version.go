package app

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app.version=...".
var version = "dev"

func newVersionCommand(streams IO) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the agent-sandbox version",
		Args:  usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			goVersion := "unknown"
			if bi, ok := debug.ReadBuildInfo(); ok {
				goVersion = bi.GoVersion
			}
			_, err := fmt.Fprintf(streams.Out, "agent-sandbox %s (%s)\n", version, goVersion)
			return err
		},
	}
}
