#!/usr/bin/env bash
# make soak: 32 concurrent MCP sessions calling k8s_get_pod_status against one MCP server on the live cluster
# (after make deploy) for SOAK_DURATION (default 5m); then every call's audit chain, the chain's
# verification, leftover call Jobs and Vault-minted ServiceAccounts/Roles/RoleBindings, and the server's
# RSS and goroutines from start to end. Exits 1 on a leak.
set -euo pipefail
. "$(dirname "$0")/../scripts/lib.sh"
cd "$AS_ROOT"
[ -f "$AS_STATE/mcp.kubeconfig" ] || die "the cluster is not deployed; run make deploy first"
make -s build
go run ./bench/soak --binary bin/agent-sandbox --policy policy/policy.yaml --kubeconfig "$AS_STATE/mcp.kubeconfig" \
  --admin-kubeconfig "$AS_STATE/admin.kubeconfig" --workspaces terraform --duration "${SOAK_DURATION:-5m}" \
  --callers "${SOAK_CALLERS:-32}" "$@"
