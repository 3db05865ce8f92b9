data "kubernetes_secret" "s" {
  metadata {
    name      = "vault-token"
    namespace = "default"
  }
}
output "s" {
  value = data.kubernetes_secret.s.data
}
