// Package harness starts the real components that integration tests run against: a kube-apiserver with
// etcd (through controller-runtime's envtest), optionally kube-controller-manager beside it, and a Vault dev
// server. Each is stopped when the test ends; its log is kept in the test's temporary directory and its
// tail is printed if the test failed.
//
// The binaries come from the environment that scripts/test-integration.sh prepares: KUBEBUILDER_ASSETS
// (kube-apiserver, etcd, kubectl) and AGENT_SANDBOX_VAULT_BIN. A missing binary fails the test with a
// message saying how to run it: integration tests are never silently skipped.
//
// It also holds what tests at every level would otherwise each write again: Terminal drives a program
// through a pseudo-terminal as a person at the keyboard would (`agent-sandbox approve` and `keygen` read
// only from a terminal; the approver's unit tests, the integration tests and test/demo, and through it the
// end-to-end tests, all drive approve with it); SyncBuffer collects output one goroutine writes while
// another reads it; ConfigMapVolume lays files out as the kubelet mounts a ConfigMap; StatusRecorder and
// PeekRPC are what a test's proxy in front of MCP server replicas logs of each request (the replica tests of
// package mcp and the stateless end-to-end test). The packages this one imports (the webhook, policy,
// sandbox, approval, audit, ...) can use it only from external (_test package) tests: an in-package test
// that imports it is an import cycle.
package harness
