// Package runner implements the tool entry points that run inside a sandbox Pod (`agent-sandbox run ...`):
// pod-status, terraform-plan and terraform-apply. Each talks to the cluster only with the per-action
// kubeconfig the credential agent wrote, and reports through one contract: exactly one JSON object, the
// command's result or {"error": "..."}, as the last line on stdout, with everything meant for humans
// (Terraform's own output, progress) on stderr. The MCP server reads that line back with DecodeResult.
//
// A saved Terraform plan travels from the plan Job to the apply Job unchanged, as a Secret in the target
// namespace named after a prefix of its SHA-256 (the plan ID). The apply Job refuses a plan whose bytes do
// not hash to exactly the plan ID it was approved for, and Terraform itself refuses a plan made against a
// state that has changed since.
package runner
