package cluster

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/cli"
)

// testMain is the root's Main with this package's commands alone, set up as the root sets up its own.
func testMain(ctx context.Context, args []string, in io.Reader, out, errOut io.Writer) int {
	streams := cli.IO{In: in, Out: out, ErrOut: errOut}
	root := &cobra.Command{Use: "agent-sandbox"}
	cli.SetupRoot(root, streams)
	root.AddCommand(NewPolicyCommand(streams), NewWebhookCommand(streams), NewCheckInstallCommand(streams), NewVaultCommand(streams), NewPreflightCommand(streams))
	return cli.Main(ctx, root, args, errOut)
}

// runCLI runs the command line with empty standard input.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = testMain(context.Background(), args, strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}
