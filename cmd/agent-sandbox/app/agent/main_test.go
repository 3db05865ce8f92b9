package agent

import (
	"context"
	"io"
	"testing"

	"github.com/spf13/cobra"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/cli"
)

// testMain is the root's Main with this package's commands alone, set up as the root sets up its own.
func testMain(ctx context.Context, args []string, in io.Reader, out, errOut io.Writer) int {
	return cli.MainOf(func(s cli.IO) []*cobra.Command {
		return []*cobra.Command{NewMCPCommand(s, "test"), NewKubeconfigCommand(s)}
	})(ctx, args, in, out, errOut)
}

// runCLI runs the command line with empty standard input.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return cli.Capture(testMain, args...)
}
