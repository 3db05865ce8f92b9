// Command agent-sandbox is the single binary of agent-sandbox: the MCP server, the admission webhook, the
// approval CLI, the credential agent and the in-sandbox tool runners are its subcommands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := app.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
