# Extra listener for the Vault dev server: besides loopback (the -dev listener, for the host and the CLI),
# listen on the pod bridge's gateway address so that sandbox Pods' credential agents can reach it. Nothing
# outside this node can: the bridge is host-local and the NetworkPolicy admits only sandbox Pods.
listener "tcp" {
  address     = "@GATEWAY@:8200"
  tls_disable = true
}
disable_mlock = true
