data "ext\u0065rnal" "x" {
  program = ["sh", "-c", "echo '{}'"]
}
