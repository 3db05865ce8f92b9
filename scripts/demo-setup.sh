#!/usr/bin/env bash
# Prepares a fresh demo folder DIR (default $AS_STATE/demo): a copy of terraform/k8s-demo to edit, an empty
# approvals database and audit log, bin/agent-sandbox built, and the demo workspace applied as it is in the
# repository, with the same state backend the sandboxes use. This is the platform team's starting point,
# done with admin rights ($KUBECONFIG), not through the agent. Used by make demo and make e2e.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$AS_ROOT"
DEMO=${1:-$AS_STATE/demo}
BIN=$AS_ROOT/bin/agent-sandbox
: "${KUBECONFIG:?set KUBECONFIG to an admin kubeconfig}"
make -s build
rm -rf "$DEMO"; mkdir -p "$DEMO/workspaces"; chmod 700 "$DEMO"
cp -r terraform/k8s-demo "$DEMO/workspaces/k8s-demo"

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
