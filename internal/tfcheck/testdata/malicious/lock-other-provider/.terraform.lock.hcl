provider "registry.terraform.io/hashicorp/null" {
  version = "3.2.1"
  hashes = ["h1:abc"]
}
