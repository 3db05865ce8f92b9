// Package auditor holds the operator's audit commands: audit show and audit verify, which read the
// hash-chained audit log the MCP server writes and, with --against-cluster, the anchors the admission
// webhook recorded in the cluster, with the operator's own kubeconfig. Whoever controls the MCP host may
// have edited the log, so the log is evidence to check, never a source of trust; the commands never link
// the webhook's decision package, the MCP SDK or the MCP server (internal/contract/layout_test.go).
package auditor
