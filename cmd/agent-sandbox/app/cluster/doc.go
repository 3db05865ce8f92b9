// Package cluster holds the trusted commands that run in the cluster or set it up: the admission webhook
// (webhook), its in-cluster check (check-install), the cluster check before installing (preflight, and the
// hidden preflight probe its Pods run), the Vault configuration from the policy (vault configure) and the
// policy's own check and reader (policy check|get, which the install scripts use). Nothing here links the
// MCP SDK, the MCP server or SQLite (internal/contract/layout_test.go).
package cluster
