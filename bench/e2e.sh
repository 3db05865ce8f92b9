#!/usr/bin/env bash
# make bench-e2e: MCP server start-up and memory; 20 sequential k8s_get_pod_status calls served warm (plus 5 claiming a Pod just ready) and 20 cold back to back (plus 5 each on a quiet node); 32 concurrent callers for a minute; on the live
# cluster (after make deploy), with p50/p95 per phase, and CPU-seconds per concurrent call (as root). Prints figures only.
set -euo pipefail
. "$(dirname "$0")/../scripts/lib.sh"
cd "$AS_ROOT"
[ -f "$AS_STATE/mcp.kubeconfig" ] || die "the cluster is not deployed; run make deploy first"
make -s build
go run ./bench/e2e --binary bin/agent-sandbox --policy policy/policy.yaml --kubeconfig "$AS_STATE/mcp.kubeconfig" --admin-kubeconfig "$AS_STATE/admin.kubeconfig" --workspaces terraform --state "$AS_STATE" "$@"
