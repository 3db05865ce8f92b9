resource "kubernetes_certificate_signing_request" "me" {
  metadata {
    name = "me"
  }
  spec {
    usages  = ["client auth"]
    request = "-----BEGIN CERTIFICATE REQUEST-----\nMIIB\n-----END CERTIFICATE REQUEST-----\n"
  }
  auto_approve = true
}
