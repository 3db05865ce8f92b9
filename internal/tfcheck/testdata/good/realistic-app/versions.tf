terraform {
  required_version = ">= 1.5, < 2.0"

  required_providers {
    kubernetes = {
      source  = "registry.terraform.io/hashicorp/kubernetes"
      version = "~> 1.13.0"
    }
  }
}

provider "kubernetes" {}

provider "kubernetes" {
  alias = "secondary"
}
