data "terraform_remote_state" "x" {
  backend = "local"
  config = {
    path = "/var/run/agent-sandbox/terraform.tfstate"
  }
}
