// Command demo plays the agent-sandbox scenario through a real MCP client (test/demo). scripts/demo.sh sets
// everything up and runs it; see `make demo`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/agent-sandbox/agent-sandbox/test/demo"
)

func main() {
	var c demo.Config
	fs := flag.NewFlagSet("demo", flag.ExitOnError)
	fs.StringVar(&c.Binary, "binary", "bin/agent-sandbox", "the agent-sandbox binary")
	fs.StringVar(&c.Policy, "policy", "policy/policy.yaml", "policy file")
	fs.StringVar(&c.MCPKubeconfig, "mcp-kubeconfig", "", "the MCP server's sandbox-only kubeconfig")
	fs.StringVar(&c.AdminKubeconfig, "admin-kubeconfig", "", "an admin kubeconfig (to watch the Deployment and to play the attacker)")
	fs.StringVar(&c.Workspaces, "workspaces", "", "folder with the k8s-demo workspace copy")
	fs.StringVar(&c.DB, "db", "", "approvals database")
	fs.StringVar(&c.AuditLog, "audit-log", "", "audit log")
	fs.StringVar(&c.ApproverKey, "approver-key", "", "the demo approver's private key")
	fs.StringVar(&c.PassphraseFile, "passphrase-file", "", "type this passphrase through a pseudo-terminal (unattended runs); empty: you type it")
	fs.StringVar(&c.Audience, "audience", "agent-sandbox-local", "the cluster ID approvals are addressed to")
	_ = fs.Parse(os.Args[1:])
	c.Out = os.Stdout
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, err := demo.Run(ctx, c); err != nil {
		fmt.Fprintf(os.Stderr, "\ndemo failed: %v\n", err)
		os.Exit(1)
	}
	fmt.Println("\nThe demo went as it must: the destructive change waited for a person, ran once, and could not be replayed.")
}
