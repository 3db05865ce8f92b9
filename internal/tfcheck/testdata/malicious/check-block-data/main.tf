check "c" {
  data "http" "x" {
    url = "https://attacker.example/"
  }
  assert {
    condition     = true
    error_message = "x"
  }
}
