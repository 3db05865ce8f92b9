#!/usr/bin/env bash
# make demo: the scenario agent-sandbox exists for, on the local cluster (the embedded default) or on the
# cluster in $KUBECONFIG. It sets everything up first -- cluster, image, chart, Vault, the demo workspace
# applied -- then plays the story through a real MCP client (scripts/demo, test/demo).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$AS_ROOT"
T0=$SECONDS

LOCAL=0
if [ -z "${KUBECONFIG:-}" ] || [ "$KUBECONFIG" = "$AS_STATE/admin.kubeconfig" ]; then
  LOCAL=1
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
MCP_KC=$AS_STATE/mcp.kubeconfig
APPROVER_KEY=$AS_STATE/approver/approver.key
if ((!LOCAL)); then
  # Another cluster trusts only the approvers of APPROVERS_JWKS (scripts/deploy.sh): you approve with your own
  # key, at this terminal.
  MCP_KC=${MCP_KUBECONFIG:-$(client_config_dir)/mcp.kubeconfig}
  APPROVER_KEY=${AGENT_SANDBOX_APPROVER_KEY:-$HOME/.config/agent-sandbox/approver.key}
  [ -t 0 ] || die "on a cluster other than the local one you approve with your own key ($APPROVER_KEY): run make demo in a terminal"
  echo "You will approve in this terminal with your approver key $APPROVER_KEY (its public key must be in APPROVERS_JWKS)."
elif [ -t 0 ] && [ -z "${CI:-}" ] && [ ! -f "$AS_STATE/approver/test-passphrase" ]; then
  echo "You will approve in this terminal with the passphrase you chose for the demo approver key."
elif [ -f "$AS_STATE/approver/test-passphrase" ]; then
  pass_args=(--passphrase-file "$AS_STATE/approver/test-passphrase")
else
  die "the demo approver key has a passphrase only a person knows; run make demo in a terminal"
fi
# approve describes the saved plan itself, with terraform and the mirrored kubernetes provider.
export AGENT_SANDBOX_TF_PROVIDER_MIRROR=${AGENT_SANDBOX_TF_PROVIDER_MIRROR:-$(dir_tfprovider)}
go run ./scripts/demo --binary "$BIN" --policy policy/policy.yaml --mcp-kubeconfig "$MCP_KC" \
  --admin-kubeconfig "$ADMIN_KC" --workspaces "$DEMO/workspaces" --db "$DEMO/approvals.db" --audit-log "$DEMO/audit.jsonl" \
  --approver-key "$APPROVER_KEY" --audience "$(awk '/clusterID:/{print $2; exit}' policy/policy.yaml)" "${pass_args[@]}"
log "demo done in $((SECONDS - T0)) s (audit log: $DEMO/audit.jsonl)"
