terraform {
  required_providers {
    kubernetes = {
      source  = "attacker.example/hashicorp/kubernetes"
      version = "1.13.4"
    }
  }
}
