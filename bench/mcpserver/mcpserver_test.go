package mcpserver

import (
	"flag"
	"slices"
	"testing"
)

// TestCommand: the flags bind with the benchmarks' defaults, and the command line runs `agent-sandbox mcp`
// with them, the state files and then the extra arguments.
func TestCommand(t *testing.T) {
	var o Options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	o.Bind(fs)
	if err := fs.Parse([]string{"-kubeconfig", "mcp.kubeconfig"}); err != nil {
		t.Fatal(err)
	}
	cmd := o.Command("a.db", "a.jsonl", "--max-concurrency", "8")
	want := []string{"bin/agent-sandbox", "mcp", "--policy", "policy/policy.yaml", "--kubeconfig", "mcp.kubeconfig", "--workspaces", "terraform",
		"--db", "a.db", "--audit-log", "a.jsonl", "--max-concurrency", "8"}
	if !slices.Equal(cmd.Args, want) {
		t.Errorf("command line %q, want %q", cmd.Args, want)
	}
}
