data "kubernetes_namespace" "n" {
  metadata {
    name = "default"
  }
  provisioner "local-exec" {
    command = "id"
  }
}
