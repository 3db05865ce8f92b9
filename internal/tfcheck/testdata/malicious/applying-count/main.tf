resource "kubernetes_namespace" "x" {
  count = terraform.applying ? 1 : 0
  metadata {
    name = "surprise"
  }
}
