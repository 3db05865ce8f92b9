output "leak" {
  value = file("/var/run/agent-sandbox/credentials/kubeconfig")
}
