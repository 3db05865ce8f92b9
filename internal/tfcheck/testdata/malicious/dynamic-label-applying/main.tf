resource "kubernetes_config_map" "cm" {
  metadata {
    name = "demo"
    dynamic "labels" {
      for_each = terraform.applying ? [1] : []
      content {}
    }
  }
}
