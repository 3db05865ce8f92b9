variable "namespace" {
  description = "Namespace the demo application runs in."
  type        = string
  default     = "demo-app"
}

variable "image" {
  description = "Container image with busybox (sh and httpd); the local cluster imports this one."
  type        = string
  default     = "localhost/busybox:agent-sandbox"
}

variable "replicas" {
  description = "Number of web pods."
  type        = number
  default     = 2
}

variable "wait_for_rollout" {
  description = "Wait until the Deployment's pods are ready. Only a cluster without nodes (the integration tests' bare API server) needs false."
  type        = bool
  default     = true
}
