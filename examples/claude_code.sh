#!/usr/bin/env sh
# Register agent-sandbox with Claude Code (stdio). Adjust the paths to your checkout and cluster.
claude mcp add agent-sandbox -- /usr/local/bin/agent-sandbox mcp \
  --policy /opt/agent-sandbox/policy/policy.yaml \
  --kubeconfig /var/lib/agent-sandbox-local/mcp.kubeconfig \
  --workspaces /opt/agent-sandbox/terraform
