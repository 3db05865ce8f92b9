package agent

import (
	"github.com/spf13/cobra"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/cli"
)

// testMain is the binary's Main with this package's commands alone, set up as the root sets up its own.
var testMain = cli.MainOf(func(s cli.IO) []*cobra.Command {
	return []*cobra.Command{NewMCPCommand(s, "test"), NewKubeconfigCommand(s)}
})
