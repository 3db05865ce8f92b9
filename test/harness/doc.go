// Package harness starts the real components that integration tests run against: a kube-apiserver with
// etcd (through controller-runtime's envtest), optionally kube-controller-manager beside it, and a Vault dev
// server. Each is stopped when the test ends; its log is kept in the test's temporary directory and its
// tail is printed if the test failed.
//
// The binaries come from the environment that scripts/test-integration.sh prepares: KUBEBUILDER_ASSETS
// (kube-apiserver, etcd, kubectl) and AGENT_SANDBOX_VAULT_BIN. A missing binary fails the test with a
// message saying how to run it: integration tests are never silently skipped.
//
// Terminal drives a program through a pseudo-terminal as a person at the keyboard would: `agent-sandbox
// approve` and `keygen` read only from a terminal. The approver's unit tests, the integration tests and
// test/demo (and through it the end-to-end tests) all drive approve with it.
package harness
