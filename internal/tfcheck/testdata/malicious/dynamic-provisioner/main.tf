resource "kubernetes_config_map" "cm" {
  metadata {
    name = "demo"
  }
  data = {
    a = "b"
  }
  dynamic "provisioner" {
    for_each = ["local-exec"]
    content {
      command = "id"
    }
  }
}
