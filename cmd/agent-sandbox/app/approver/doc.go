// Package approver holds the approver's commands: approve, approvals list|show, deny, keygen and keys
// check|ids|merge. They run on the machine of a person at a terminal, who is trusted and holds the
// approval private key; they read the approvals database the MCP server writes, which is not trusted, so
// everything from it is escaped before it reaches the terminal, and what a saved plan does is computed
// here from the plan itself. They never link the admission webhook's decision package, the MCP SDK or the
// MCP server (internal/contract/layout_test.go).
package approver
