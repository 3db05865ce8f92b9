// Package webhook is agent-sandbox's real control: the validating and mutating admission webhook for
// sandbox namespaces. The MCP server is untrusted, so everything here holds for a Job or Pod created
// directly with kubectl:
//
//   - Jobs are mutated on CREATE only, idempotently: the credential agent is injected as a native sidecar
//     with a memory-backed credential volume and a Vault-audience token only it can read (Inject).
//   - Jobs and Pods are validated on CREATE and UPDATE (Checker): the policy's CEL admission rules, a known
//     tool, exactly the image and command the policy renders for the declared parameters, the tool's
//     ServiceAccount, an allowed target namespace, and for tools that need it signed approval tokens, from
//     as many distinct trusted approvers as they say the call needs, each consumed in a ledger shared by
//     every replica (ledger.ConfigMapLedger, in internal/ledger).
//   - Pods are created only by the Job controller; exec, attach, port-forward, ephemeral containers and
//     every other workload kind are denied in sandbox namespaces.
//
// Every denial names the rule that failed and says why on one line. The policy and approver keys are
// reloaded from files (FileSource); a policy that fails to compile never replaces the running one.
package webhook
