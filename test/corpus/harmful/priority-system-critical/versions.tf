terraform {
  required_version = ">= 1.5"

  required_providers {
    kubernetes = {
      source  = "hashicorp/kubernetes"
      version = "1.13.4"
    }
  }

  # No backend block: the agent-sandbox runner adds one (state in a Secret of the target namespace).
}

# No inline credentials: the provider reads the per-action kubeconfig named by KUBECONFIG, which the
# sandbox's credential agent writes and the runner passes to Terraform.
provider "kubernetes" {}
