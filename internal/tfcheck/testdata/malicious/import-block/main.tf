import {
  to = kubernetes_namespace.ks
  id = "kube-system"
}
resource "kubernetes_namespace" "ks" {
  metadata {
    name = "kube-system"
  }
}
