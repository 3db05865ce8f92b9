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
make -s build

DEMO=$AS_STATE/demo
rm -rf "$DEMO"; mkdir -p "$DEMO/workspaces"; chmod 700 "$DEMO"
cp -r terraform/k8s-demo "$DEMO/workspaces/k8s-demo"

# The platform team's starting point: the demo workspace applied as it is in the repository, with the
# same state backend the sandboxes use. This is set-up, done with admin rights, not through the agent.
log "applying the demo workspace (set-up)"
rc=$DEMO/terraform.rc
printf 'provider_installation {\n  filesystem_mirror {\n    path    = "%s"\n    include = ["registry.terraform.io/hashicorp/kubernetes"]\n  }\n}\n' "$(dir_tfprovider)" > "$rc"
plan=$(TF_CLI_CONFIG_FILE=$rc "$BIN" run terraform-plan --workspace k8s-demo --source "$DEMO/workspaces/k8s-demo" --namespace demo-app 2>"$DEMO/setup.log" | tail -n 1) \
  || die "set-up plan failed: $(tail -n 5 "$DEMO/setup.log")"
if ! printf '%s' "$plan" | grep -q '"no_changes":true'; then
  id=$(printf '%s' "$plan" | sed -n 's/.*"plan_id":"\([0-9a-f]*\)".*/\1/p')
  TF_CLI_CONFIG_FILE=$rc "$BIN" run terraform-apply --workspace k8s-demo --source "$DEMO/workspaces/k8s-demo" --namespace demo-app \
    --plan-id "$id" >>"$DEMO/setup.log" 2>&1 || die "set-up apply failed: $(tail -n 5 "$DEMO/setup.log")"
fi
KUBECTL -n demo-app rollout status deployment/web --timeout=120s >/dev/null
log "set-up done in $((SECONDS - T0)) s; starting the demo"

pass_args=()
if [ -t 0 ] && [ -z "${CI:-}" ] && [ ! -f "$AS_STATE/approver/test-passphrase" ]; then
  echo "You will approve in this terminal with the passphrase you chose for the demo approver key."
elif [ -f "$AS_STATE/approver/test-passphrase" ]; then
  pass_args=(--passphrase-file "$AS_STATE/approver/test-passphrase")
else
  die "the demo approver key has a passphrase only a person knows; run make demo in a terminal"
fi
go run ./scripts/demo --binary "$BIN" --policy policy/policy.yaml --mcp-kubeconfig "$AS_STATE/mcp.kubeconfig" \
  --admin-kubeconfig "$ADMIN_KC" --workspaces "$DEMO/workspaces" --db "$DEMO/approvals.db" --audit-log "$DEMO/audit.jsonl" \
  --approver-key "$AS_STATE/approver/approver.key" --audience "$(awk '/clusterID:/{print $2; exit}' policy/policy.yaml)" "${pass_args[@]}"
log "demo done in $((SECONDS - T0)) s (audit log: $DEMO/audit.jsonl)"
