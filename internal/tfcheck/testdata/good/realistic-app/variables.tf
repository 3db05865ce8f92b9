variable "namespace" {
  description = "Namespace of the app."
  type        = string
  default     = "shop"

  validation {
    condition     = can(regex("^[a-z0-9-]{1,63}$", var.namespace))
    error_message = "The namespace must be a DNS label."
  }
}

variable "replicas" {
  type     = number
  default  = 2
  nullable = false
}

variable "env" {
  description = "Environment variables of the container."
  type        = map(string)
  default = {
    LOG_LEVEL = "info"
    FEATURES  = "a,b"
  }
}

variable "ports" {
  type = list(object({
    name = string
    port = number
    tls  = optional(bool, false)
  }))
  default = [
    { name = "http", port = 8080 },
    { name = "metrics", port = 9090 },
  ]
}

variable "api_key" {
  type      = string
  default   = ""
  sensitive = true
}

variable "extra_config_maps" {
  type    = set(string)
  default = ["feature-flags", "routing"]
}
