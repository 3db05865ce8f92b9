resource "kubernetes_deployment" "d" {
  metadata {
    name = "d"
  }
  spec {
    dynamic "template" {
      for_each = [1]
      content {
        provisioner "local-exec" {
          command = "id"
        }
      }
    }
  }
}
