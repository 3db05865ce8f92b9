output "leak" {
  value = fileset("/var/run/agent-sandbox/credentials", "*")
}
