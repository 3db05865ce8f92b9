// Package approval holds everything that makes a destructive tool call wait for a person: the canonical form
// and hash of a call's parameters, the approvers' ed25519 keys, the signed approval tokens, and the requests
// the MCP server parks until a human grants or denies them. The SQLite file that keeps those requests is
// the subpackage store, on the MCP server's and the approver's side only: the admission webhook imports this
// package and never SQLite (internal/contract's layout test).
//
// The single-use rule lives here and only here, and so does the count of approvers. Approval tokens can only
// be verified by consuming them (Verifier.ConsumeAll checks every token, then that they are signed by as many
// distinct approvers as the call needs, then records every ID in a Ledger), and a request's stored grants, one
// per approver, can only be read by consuming them (store.Store.Consume flips the request from granted to consumed
// and reads all its tokens in one transaction). The one exception, Verifier.CheckDryRunAll (and CheckDryRun),
// exists for admission dry-run requests, which by definition change nothing.
//
// Who does what:
//
//   - the MCP server (untrusted) calls CreateRequest when a tool needs approval, and FindGranted plus
//     Store.Consume to pick up a grant; it never holds a private key, so it cannot mint a token;
//   - the approver (a person at a terminal) runs `agent-sandbox approve`, which signs a token with Sign
//     and stores it with Store.Grant; a call that needs several approvers waits for each of them;
//   - the admission webhook (trusted) holds the public KeySet and calls Verifier.ConsumeAll.
package approval
