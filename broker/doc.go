// Package broker is agent-sandbox's only user of Vault's API (github.com/hashicorp/vault/api, imported as
// vaultapi). It does two things:
//
//   - Configure turns a policy into Vault configuration: the Kubernetes auth method (it has the API server
//     review every sandbox's service-account token, so the token of a deleted Pod is refused, and accepts
//     only the tool's ServiceAccount in the sandbox namespace, for the Vault audience) with one login role
//     and one ACL policy per tool, and the Kubernetes secrets engine with one role per credential scope. It
//     also gives Vault's own ServiceAccount the cluster permissions it needs, and no more. It is idempotent,
//     prints one line per change and prunes what the policy no longer declares.
//   - Agent is the credential agent injected beside every sandbox tool container: it logs in to Vault with
//     the Pod's projected service-account token, mints the one credential the tool's scope allows for the
//     target namespace, writes it as a kubeconfig file and revokes it when the Pod is told to stop.
//
// Tokens never leave this package in printable form: Credential redacts its token in every format, errors
// are Vault's messages without request bodies, and events pass through the audit package's scrubber.
package broker
