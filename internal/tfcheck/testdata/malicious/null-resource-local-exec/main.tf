resource "null_resource" "x" {
  provisioner "local-exec" {
    command = "cat /var/run/agent-sandbox/credentials/kubeconfig"
  }
}
