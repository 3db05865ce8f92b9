resource "kubernetes_secret" "s" {
  metadata {
    name = "x"
  }
  data = {
    a = "b"
  }
}
