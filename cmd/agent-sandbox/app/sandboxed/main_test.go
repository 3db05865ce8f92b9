package sandboxed

import (
	"context"
	"io"

	"github.com/spf13/cobra"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/cli"
)

// testMain is the binary's Main with this package's commands alone, set up as the root sets up its own.
var testMain cli.MainFunc = sandboxedMain

// sandboxedMain is testMain, declared as a function because run warm runs the command line it is given
// through it, and a variable cannot name itself in its own declaration.
func sandboxedMain(ctx context.Context, args []string, in io.Reader, out, errOut io.Writer) int {
	return cli.MainOf(func(s cli.IO) []*cobra.Command {
		return []*cobra.Command{NewCredAgentCommand(s), NewRunCommand(s, sandboxedMain)}
	})(ctx, args, in, out, errOut)
}
