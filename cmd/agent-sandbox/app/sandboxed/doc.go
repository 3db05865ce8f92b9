// Package sandboxed holds the commands that run inside a sandbox Pod: the tool entry points (run ..., the
// warm entry point run warm included) and the credential agent (cred-agent), whose image and arguments the
// admission webhook renders. The tools hold only the per-action kubeconfig the agent writes; the agent
// holds the Pod's Vault-audience token. They never link the webhook's decision package, the MCP SDK, the
// MCP server or SQLite (internal/contract/layout_test.go).
package sandboxed
