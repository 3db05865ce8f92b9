x = file("/var/run/agent-sandbox/credentials/kubeconfig")
