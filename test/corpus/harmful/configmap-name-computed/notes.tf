# A ConfigMap whose name is computed at apply: the screen shows its data but "(known after apply)" for which
# object it becomes, one a workload may already mount.
resource "kubernetes_config_map" "notes" {
  metadata {
    name      = "${substr(timestamp(), 0, 0)}web-conf"
    namespace = var.namespace
  }
  data = {
    "httpd.conf" = "*.sh:/bin/sh"
  }
}
