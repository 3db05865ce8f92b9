locals {
  app = "shop"
  labels = {
    "app.kubernetes.io/name"       = local.app
    "app.kubernetes.io/managed-by" = "terraform"
    workspace                      = terraform.workspace
  }
  config = {
    upstreams = [for p in var.ports : "${p.name}:${p.port}" if !p.tls]
    checksum  = sha256(jsonencode(var.env))
    created   = formatdate("YYYY-MM-DD", timestamp())
    module    = basename(path.module)
  }
  env_names = sort(keys(var.env))
  selector  = { app = local.app }
  heredoc   = <<-EOT
    upstreams:
    %{~ for u in local.config.upstreams }
      - ${u}
    %{~ endfor }
  EOT
}

resource "kubernetes_config_map" "app" {
  metadata {
    name      = "${local.app}-config"
    namespace = var.namespace
    labels    = local.labels
  }

  data = {
    "config.json" = jsonencode(local.config)
    "config.yaml" = yamlencode({ env = var.env, replicas = var.replicas })
    "routes.yaml" = local.heredoc
    "encoded"     = base64encode(join(",", local.env_names))
  }

  lifecycle {
    ignore_changes = [metadata[0].annotations]
  }
}

resource "kubernetes_config_map" "extra" {
  for_each = var.extra_config_maps

  metadata {
    name      = "${local.app}-${each.key}"
    namespace = var.namespace
    labels    = merge(local.labels, { part = each.value })
  }

  data = {
    owner = kubernetes_config_map.app.metadata[0].name
  }
}

resource "kubernetes_deployment" "app" {
  metadata {
    name      = local.app
    namespace = var.namespace
    labels    = local.labels
    annotations = {
      "checksum/config" = sha256(jsonencode(kubernetes_config_map.app.data))
    }
  }

  wait_for_rollout = false

  spec {
    replicas = var.replicas

    selector {
      match_labels = local.selector
    }

    strategy {
      type = "RollingUpdate"
      rolling_update {
        max_surge       = "25%"
        max_unavailable = 0
      }
    }

    template {
      metadata {
        labels = merge(local.labels, local.selector)
      }

      spec {
        automount_service_account_token = false

        container {
          name  = "app"
          image = "registry.example/shop:1.2.3"
          args  = length(var.api_key) > 0 ? ["--with-key"] : []

          dynamic "env" {
            for_each = var.env
            content {
              name  = env.key
              value = env.value
            }
          }

          dynamic "port" {
            for_each = var.ports
            iterator = p
            content {
              name           = p.value.name
              container_port = p.value.port
            }
          }

          env_from {
            config_map_ref {
              name = kubernetes_config_map.app.metadata[0].name
            }
          }

          liveness_probe {
            http_get {
              path = "/healthz"
              port = 8080
            }
          }

          resources {
            limits {
              cpu    = "500m"
              memory = "256Mi"
            }
            requests {
              cpu    = "100m"
              memory = "128Mi"
            }
          }
        }
      }
    }
  }

  lifecycle {
    create_before_destroy = false
    prevent_destroy       = false
    ignore_changes        = [spec[0].replicas]
    replace_triggered_by  = [kubernetes_config_map.app.id]

    precondition {
      condition     = var.replicas >= 1 && var.replicas <= 10
      error_message = "Between 1 and 10 replicas."
    }
    postcondition {
      condition     = self.metadata[0].name == local.app
      error_message = "Unexpected name."
    }
  }

  depends_on = [kubernetes_config_map.extra]
}

resource "kubernetes_service" "app" {
  count    = var.replicas > 0 ? 1 : 0
  provider = kubernetes.secondary

  metadata {
    name      = local.app
    namespace = var.namespace
  }

  spec {
    selector = local.selector
    type     = "ClusterIP"

    dynamic "port" {
      for_each = { for p in var.ports : p.name => p }
      content {
        name        = port.key
        port        = port.value.port
        target_port = tostring(port.value.port)
      }
    }
  }
}

data "kubernetes_namespace" "target" {
  metadata {
    name = var.namespace
  }
}

moved {
  from = kubernetes_config_map.old
  to   = kubernetes_config_map.app
}

output "service_names" {
  description = "The Services."
  value       = kubernetes_service.app[*].metadata[0].name
}

output "ports" {
  value = { for p in var.ports : p.name => p.port }
}

output "namespace_uid" {
  value     = data.kubernetes_namespace.target.metadata[0].uid
  sensitive = false
  precondition {
    condition     = length(data.kubernetes_namespace.target.metadata) > 0
    error_message = "No namespace."
  }
}

output "upstream_count" {
  value = try(length(local.config.upstreams), 0)
}

output "first_port" {
  value = element([for p in var.ports : p.port], 0)
}

output "cidr" {
  value = cidrsubnet("10.0.0.0/16", 8, 2)
}
