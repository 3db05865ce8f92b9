// Package agent holds the commands that run beside the AI agent, on its host, and are not trusted: the MCP
// server (mcp), which builds and submits the sandbox Jobs the admission webhook then judges, and the
// writer of its kubeconfig (kubeconfig refresh), limited to the sandbox namespace. A compromised MCP host
// can at most submit Jobs the webhook admits, so nothing here decides: the commands never link the
// webhook's decision package, Vault's API or the broker, nor the commands of a trusted role
// (internal/contract/layout_test.go).
package agent
