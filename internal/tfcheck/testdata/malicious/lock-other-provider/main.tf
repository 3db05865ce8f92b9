output "x" {
  value = "ok"
}
