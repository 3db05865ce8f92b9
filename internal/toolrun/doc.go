// Package toolrun is the code that runs as the tool inside a sandbox Pod: the entry points of
// `agent-sandbox run ...` (pod-status, pod-logs, events, describe, rollout-status, terraform-plan,
// terraform-apply, terraform-show, tf-check). It is the inside of a sandbox; package sandbox is the outside
// (sandbox.Runner creates a tool's Job, follows it and collects its result from the MCP server's side).
//
// Each entry point talks to the cluster only with the per-action kubeconfig the credential agent wrote,
// and reports through one contract: exactly one JSON object, its result or {"error": "..."}, written to
// the result file, which the credential agent reports on its own output once the tool has exited. Everything
// meant for humans (Terraform's own output, progress) goes to stderr, scrubbed of the credential. The MCP
// server reads the result back with DecodeResult.
//
// A saved Terraform plan travels from the plan Job to the apply Job unchanged: in the plan's result, then
// as the immutable ConfigMap tfplan-<plan ID> of the sandbox namespace that the MCP server stores, named by
// its SHA-256. The apply Job refuses a plan whose bytes do not hash to exactly the plan ID it was approved
// for, and Terraform itself refuses a plan made against a state that has changed since.
package toolrun
