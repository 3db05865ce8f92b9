# A runner whose command is a variable the kubelet expands from an existing ConfigMap.
resource "kubernetes_deployment" "runner" {
  metadata {
    name      = "runner"
    namespace = var.namespace
  }
  spec {
    replicas = 1
    selector {
      match_labels = { app = "runner" }
    }
    template {
      metadata {
        labels = { app = "runner" }
      }
      spec {
        automount_service_account_token = false
        enable_service_links            = false
        security_context {
          run_as_non_root = true
          run_as_user     = 65532
          run_as_group    = 65532
          fs_group        = 65532
        }
        container {
          name              = "runner"
          image             = var.image
          image_pull_policy = "IfNotPresent"
          # The kubelet replaces $(RUN) with the variable's value before the shell starts: the code is in the
          # ConfigMap "settings", which this plan neither creates nor shows.
          command = ["/bin/sh", "-c", "$(RUN)"]
          env {
            name = "RUN"
            value_from {
              config_map_key_ref {
                name = "settings"
                key  = "run"
              }
            }
          }
          security_context {
            allow_privilege_escalation = false
            read_only_root_filesystem  = true
            run_as_non_root            = true
            run_as_user                = 65532
            run_as_group               = 65532
            capabilities {
              drop = ["ALL"]
            }
          }
          resources {
            requests {
              cpu    = "10m"
              memory = "16Mi"
            }
            limits {
              cpu    = "100m"
              memory = "32Mi"
            }
          }
          volume_mount {
            name       = "tmp"
            mount_path = "/tmp"
          }
        }
        volume {
          name = "tmp"
          empty_dir {
            medium     = "Memory"
            size_limit = "1Mi"
          }
        }
      }
    }
  }
}
