provider "kubernetes" {
  config_path = "/tmp/other-kubeconfig"
}
