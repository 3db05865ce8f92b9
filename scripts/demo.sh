#!/usr/bin/env bash
# make demo: the scenario agent-sandbox exists for, on the local cluster (the embedded default) or on the
# cluster in $KUBECONFIG. It sets everything up first -- cluster, image, chart, Vault, the demo workspace
# applied -- then plays the story through a real MCP client (scripts/demo, test/demo).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$AS_ROOT"
T0=$SECONDS

if [ -z "${KUBECONFIG:-}" ] || [ "$KUBECONFIG" = "$AS_STATE/admin.kubeconfig" ]; then
  need_root "make demo on the local cluster" demo
  scripts/up.sh
  export KUBECONFIG=$AS_STATE/admin.kubeconfig
fi
scripts/deploy.sh
ADMIN_KC=$KUBECONFIG
BIN=$AS_ROOT/bin/agent-sandbox
DEMO=$AS_STATE/demo
scripts/demo-setup.sh "$DEMO"
log "set-up done in $((SECONDS - T0)) s; starting the demo"

pass_args=()
if [ -t 0 ] && [ -z "${CI:-}" ] && [ ! -f "$AS_STATE/approver/test-passphrase" ]; then
  echo "You will approve in this terminal with the passphrase you chose for the demo approver key."
elif [ -f "$AS_STATE/approver/test-passphrase" ]; then
  pass_args=(--passphrase-file "$AS_STATE/approver/test-passphrase")
else
  die "the demo approver key has a passphrase only a person knows; run make demo in a terminal"
fi
# approve describes the saved plan itself, with terraform and the mirrored kubernetes provider.
export AGENT_SANDBOX_TF_PROVIDER_MIRROR=${AGENT_SANDBOX_TF_PROVIDER_MIRROR:-$(dir_tfprovider)}
go run ./scripts/demo --binary "$BIN" --policy policy/policy.yaml --mcp-kubeconfig "$AS_STATE/mcp.kubeconfig" \
  --admin-kubeconfig "$ADMIN_KC" --workspaces "$DEMO/workspaces" --db "$DEMO/approvals.db" --audit-log "$DEMO/audit.jsonl" \
  --approver-key "$AS_STATE/approver/approver.key" --audience "$(awk '/clusterID:/{print $2; exit}' policy/policy.yaml)" "${pass_args[@]}"
log "demo done in $((SECONDS - T0)) s (audit log: $DEMO/audit.jsonl)"
