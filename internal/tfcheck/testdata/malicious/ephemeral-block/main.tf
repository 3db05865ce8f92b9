ephemeral "random_password" "x" {
  length = 8
}
