resource "kubernetes_config_map" "cm" {
  metadata {
    name = "demo"
  }
  data = {
    a = "b"
  }
  prоvisioner "local-exec" {
    command = "id"
  }
}
