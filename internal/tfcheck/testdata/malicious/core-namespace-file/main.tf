output "leak" {
  value = core::file("/var/run/agent-sandbox/credentials/kubeconfig")
}
