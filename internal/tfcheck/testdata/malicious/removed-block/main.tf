removed {
  from = kubernetes_namespace.x
  lifecycle {
    destroy = false
  }
}
