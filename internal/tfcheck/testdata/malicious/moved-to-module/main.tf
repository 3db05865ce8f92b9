moved {
  from = kubernetes_namespace.a
  to   = module.m.kubernetes_namespace.a
}
