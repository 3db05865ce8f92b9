output "x" {
  value = terraform["applying"]
}
