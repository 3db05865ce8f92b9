data "kubernetes_config_map" "c" {
  metadata {
    name = "x"
  }
}
output "x" {
  value = nonsensitive(data.kubernetes_config_map.c.data)
}
