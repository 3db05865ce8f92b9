// Package approval holds everything that makes a destructive tool call wait for a person: the canonical form
// and hash of a call's parameters, the approvers' ed25519 keys, the signed approval tokens, and the SQLite
// store in which the MCP server parks requests until a human grants or denies them.
//
// The single-use rule lives here and only here. An approval token can only be verified by consuming it
// (Verifier.Consume records its ID in a Ledger after every other check passed), and a stored grant can only be
// read by consuming it (Store.Consume flips it from granted to consumed in one SQL statement). The one
// exception, Verifier.CheckDryRun, exists for admission dry-run requests, which by definition change nothing.
//
// Who does what:
//
//   - the MCP server (untrusted) calls CreateRequest when a tool needs approval, and FindGranted plus
//     Store.Consume to pick up a grant; it never holds a private key, so it cannot mint a token;
//   - the approver (a person at a terminal) runs `agent-sandbox approve`, which signs a token with Sign
//     and stores it with Store.Grant;
//   - the admission webhook (trusted) holds the public KeySet and calls Verifier.Consume.
package approval
