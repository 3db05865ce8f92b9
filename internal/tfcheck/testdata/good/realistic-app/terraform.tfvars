namespace = "shop"
replicas  = 3
env = {
  LOG_LEVEL = "debug"
}
ports = [
  { name = "http", port = 8080 },
]
