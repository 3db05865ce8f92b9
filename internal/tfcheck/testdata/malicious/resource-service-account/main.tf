resource "kubernetes_service_account" "sa" {
  metadata {
    name      = "builder"
    namespace = "demo-app"
  }
}
