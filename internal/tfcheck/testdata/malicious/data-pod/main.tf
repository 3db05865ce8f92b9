data "kubernetes_pod" "web" {
  metadata {
    name      = "web"
    namespace = "demo-app"
  }
}

output "env" {
  value = data.kubernetes_pod.web.spec
}
