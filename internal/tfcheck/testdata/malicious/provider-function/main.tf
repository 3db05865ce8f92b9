output "x" {
  value = provider::kubernetes::manifest_decode("{}")
}
