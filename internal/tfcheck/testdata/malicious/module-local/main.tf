module "m" {
  source = "./sub"
}
