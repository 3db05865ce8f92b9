resource "kubernetes_namespace" "x" {
