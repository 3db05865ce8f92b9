resource "kubernetes_config_map" "cm" {
  metadata {
    name = "demo"
  }
  data = {
    a = <<EOT
%{ if terraform.applying }evil%{ else }good%{ endif }
EOT
  }

}
