data "kubernetes_service_account" "sa" {
  metadata {
    name = "default"
  }
}
