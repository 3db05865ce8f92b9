// Package mcpserver is the agent-sandbox MCP server a benchmark starts on the live cluster: the binary,
// policy, sandbox-only kubeconfig and workspaces it runs with, bound to the same flags in every benchmark,
// and the `agent-sandbox mcp` command line they make.
package mcpserver

import (
	"flag"
	"os/exec"
)

// Options are what the server runs with.
type Options struct {
	Binary, Policy, Kubeconfig, Workspaces string
}

// Bind binds the options to the flags -binary, -policy, -kubeconfig and -workspaces of fs.
func (o *Options) Bind(fs *flag.FlagSet) {
	fs.StringVar(&o.Binary, "binary", "bin/agent-sandbox", "the agent-sandbox binary")
	fs.StringVar(&o.Policy, "policy", "policy/policy.yaml", "policy")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "the MCP server's kubeconfig")
	fs.StringVar(&o.Workspaces, "workspaces", "terraform", "workspaces folder")
}

// Command is `agent-sandbox mcp` with the options, its approvals database in db and its audit log in
// auditLog, and then the extra arguments.
func (o Options) Command(db, auditLog string, extra ...string) *exec.Cmd {
	args := append([]string{"mcp", "--policy", o.Policy, "--kubeconfig", o.Kubeconfig, "--workspaces", o.Workspaces,
		"--db", db, "--audit-log", auditLog}, extra...)
	return exec.Command(o.Binary, args...)
}
