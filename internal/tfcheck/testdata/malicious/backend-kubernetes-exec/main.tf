terraform {
  backend "kubernetes" {
    secret_suffix = "x"
    exec {
      api_version = "client.authentication.k8s.io/v1beta1"
      command     = "id"
    }
  }
}
