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
# The workspace's Terraform files only, as the MCP server publishes them (README.md stays behind).
export TF_CLI_CONFIG_FILE=$rc
src=$DEMO/setup-source; mkdir -p "$src"; cp terraform/k8s-demo/*.tf "$src/"
"$BIN" run terraform-plan --workspace k8s-demo --source "$src" --namespace demo-app --save-plan "$DEMO/setup.tfplan" 2>"$DEMO/setup.log" > "$DEMO/setup-plan.json" \
  || die "set-up plan failed: $(tail -n 5 "$DEMO/setup.log")"
if ! grep -q '"no_changes":true' "$DEMO/setup-plan.json"; then
  # The saved plan, written beside the result; its SHA-256 is the plan ID terraform-apply checks it against.
  id=$(sha256sum "$DEMO/setup.tfplan" | cut -d" " -f1)
  "$BIN" run terraform-apply --workspace k8s-demo --namespace demo-app --plan-file "$DEMO/setup.tfplan" \
    --plan-id "$id" >>"$DEMO/setup.log" 2>&1 || die "set-up apply failed: $(tail -n 5 "$DEMO/setup.log")"
fi
KUBECTL -n demo-app rollout status deployment/web --timeout=120s >/dev/null
