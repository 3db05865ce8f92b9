output "x" {
  value = module.m.secret
}
