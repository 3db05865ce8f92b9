# provisioner "local-exec" { command = "id" }  <- only a comment
/* provider "kubernetes" { exec { command = "x" } } */

resource "kubernetes_config_map" "notes" {
  metadata {
    name = "notes"
  }
  data = {
    "readme.md"   = "Do not use local-exec or remote-exec; external data sources are refused."
    "snippet.hcl" = <<-EOT
      provider "kubernetes" {
        exec {
          command = "aws"
        }
      }
      resource "null_resource" "x" {
        provisioner "local-exec" {
          command = "echo $${file("/etc/passwd")}"
        }
      }
    EOT
    "escaped"     = "$${file(\"/etc/passwd\")} and %%{ if terraform.applying }"
  }
}

resource "kubernetes_pod" "probe" {
  metadata {
    name = "probe"
  }
  spec {
    container {
      name    = "app"
      image   = "busybox:1.36"
      command = ["sh", "-c", "exec sleep 3600"]
      liveness_probe {
        exec {
          command = ["cat", "/tmp/healthy"]
        }
      }
      lifecycle {
        post_start {
          exec {
            command = ["sh", "-c", "echo started"]
          }
        }
      }
    }
  }
}

output "for_shadow" {
  # "terraform" here is the for expression's own variable, not Terraform's object.
  value = [for terraform in ["a", "b"] : upper(terraform)]
}
