provider "kubernetes" {
  config_path = "/tmp/attacker-kubeconfig"
}
