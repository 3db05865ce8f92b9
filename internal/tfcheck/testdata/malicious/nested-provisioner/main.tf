resource "kubernetes_config_map" "cm" {
  metadata {
    name = "demo"
  }
  data = {
    a = "b"
  }
  timeouts {
    provisioner "local-exec" {
      command = "id"
    }
  }
}
