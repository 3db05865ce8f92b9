package audit

import (
	"os"
	"path/filepath"
)

// EnvPath is the environment variable that overrides the audit log's location.
const EnvPath = "AGENT_SANDBOX_AUDIT_LOG"

// DefaultPath returns where the MCP server writes, and the audit command reads, the audit log:
// $AGENT_SANDBOX_AUDIT_LOG if set, else $XDG_STATE_HOME/agent-sandbox/audit.jsonl if XDG_STATE_HOME is an
// absolute path, else ~/.local/state/agent-sandbox/audit.jsonl. Without a home directory it falls back to
// audit.jsonl in the working directory.
func DefaultPath() string {
	return defaultPath(os.Getenv, os.UserHomeDir)
}

func defaultPath(getenv func(string) string, home func() (string, error)) string {
	if p := getenv(EnvPath); p != "" {
		return p
	}
	// The XDG base directory spec says relative values are invalid and must be ignored.
	if d := getenv("XDG_STATE_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "agent-sandbox", "audit.jsonl")
	}
	if h, err := home(); err == nil && h != "" {
		return filepath.Join(h, ".local", "state", "agent-sandbox", "audit.jsonl")
	}
	return "audit.jsonl"
}
