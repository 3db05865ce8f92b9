#!/usr/bin/env bash
# make bench-cost: CPU-seconds per call on the live cluster (after make deploy), cold, warm and under load,
# by component (host runsc invocations, sandbox Sentry+gofer, containerd and shims, kubelet, API server,
# etcd, controller-manager, webhook, Vault, MCP server), measured with /proc, the Pod cgroups and process
# accounting, with an idle baseline before and after subtracted. Prints figures only. Root (acct(2)).
# Knobs: COST_N sequential calls per mode (8), COST_IDLE each baseline (15s), COST_CONCURRENT callers of the
# loaded run (32, 0 skips it), COST_DURATION its length (60s), COST_MAX_CONCURRENCY the MCP server's (8).
set -euo pipefail
. "$(dirname "$0")/../scripts/lib.sh"
cd "$AS_ROOT"
[ "$(id -u)" = 0 ] || die "make bench-cost must run as root: it turns on process accounting (acct(2)) and reads every process's /proc"
[ -f "$AS_STATE/mcp.kubeconfig" ] || die "the cluster is not deployed; run make deploy first"
# Built before anything is measured: nothing the benchmark builds counts against the calls.
make -s build
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/bench-e2e" ./bench/e2e
"$tmp/bench-e2e" --cost --binary bin/agent-sandbox --policy policy/policy.yaml --kubeconfig "$AS_STATE/mcp.kubeconfig" \
  --admin-kubeconfig "$AS_STATE/admin.kubeconfig" --workspaces terraform --state "$AS_STATE" \
  --cost-n "${COST_N:-8}" --idle "${COST_IDLE:-15s}" --concurrent "${COST_CONCURRENT:-32}" \
  --duration "${COST_DURATION:-60s}" --max-concurrency "${COST_MAX_CONCURRENCY:-8}" "$@"
