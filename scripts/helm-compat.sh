#!/usr/bin/env bash
# make helm-compat: the chart under Helm 4 and Helm 3 in turn on the live local cluster, each step followed by
# the chart's own `helm test` (scripts/helm-test.sh):
#   1. Helm 4 upgrades the release Helm 3 installed (make deploy HELM=4: client-side, as --server-side=auto
#      keeps a release's method) and rolls it back;
#   2. Helm 4 uninstalls it and installs it afresh (make deploy HELM=4: server-side apply), upgrades it
#      server-side (every object re-applied through the running webhook) and rolls back;
#   3. Helm 3 takes the Helm 4 release over (make deploy); then Helm 4 uninstalls it and Helm 3 installs it
#      again (make deploy), so the cluster ends as make deploy leaves it.
# Needs root and a deployed local cluster (make up && make deploy). Between an uninstall and the next install
# (about a minute) the sandbox namespace has no webhook, NetworkPolicies or quota: run it only on a cluster
# that nothing else uses meanwhile. Prints one line per step with its time and the release's apply method.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$AS_ROOT"
need_root "make helm-compat" helm-compat
export KUBECONFIG=$AS_STATE/admin.kubeconfig
[ -f "$AS_STATE/mcp.kubeconfig" ] || die "the local cluster is not deployed; run make up && make deploy first"
RELEASE_NS=agent-sandbox-system
H4=$(HELM=4 helm_bin)
HELM=3 helm_bin >/dev/null   # built now if missing, not in the middle
# Each upgrade sets webhook.timeoutSeconds to 12 and each rollback must bring back the chart's 10.
changed=$(mktemp); trap 'rm -f "$changed"' EXIT
echo 'webhook: {timeoutSeconds: 12}' > "$changed"
T0=$SECONDS
step() { log "== $* (t+$((SECONDS - T0)) s)"; }
method() { "$H4" -n "$RELEASE_NS" get metadata agent-sandbox | sed -n 's/^\(REVISION\|APPLY_METHOD\): /\1 /p' | paste -sd' ' >&2; }
method_is() {
  local got
  got=$("$H4" -n "$RELEASE_NS" get metadata agent-sandbox | sed -n 's/^APPLY_METHOD: //p')
  [ "$got" = "$1" ] || die "the release's apply method is \"$got\" after that step, want \"$1\""
  method
}
revision() { "$H4" -n "$RELEASE_NS" history agent-sandbox --max 1 -o json | sed -n 's/.*"revision":\([0-9]*\).*/\1/p'; }
helmtest() { HELM=$1 scripts/helm-test.sh; }
# uninstall: Vault refuses sandbox logins first (docs/install.md, Uninstall procedure: without the webhook,
# anybody with edit in the sandbox namespace could log in as a tool); the deploy after it configures Vault again.
uninstall() {
  "$(agent_sandbox_bin)" vault disable --policy "$(profile_policy)" --vault-addr http://127.0.0.1:8200 \
    --vault-token-file "$AS_STATE/vault/root-token" >&2
  "$H4" -n "$RELEASE_NS" uninstall agent-sandbox --wait --timeout 3m >&2
}
# deploy HELM [VALUES]: make deploy with that helm (and that values file), quietly; its log goes to stderr.
deploy() { HELM=$1 HELM_VALUES=${2:-} CI=1 scripts/deploy.sh >/dev/null; }
# timeout_is N: the webhook configurations carry the timeoutSeconds of the revision that was applied.
timeout_is() {
  local got
  got=$(KUBECTL get validatingwebhookconfiguration agent-sandbox -o jsonpath='{.webhooks[0].timeoutSeconds}')
  [ "$got" = "$1" ] || die "timeoutSeconds is $got after that step, want $1"
}
rollback() {
  local prev=$(( $(revision) - 1 ))
  step "$1 rolls back to revision $prev"
  "$H4" -n "$RELEASE_NS" rollback agent-sandbox "$prev" --wait --timeout 3m >&2
  KUBECTL -n "$RELEASE_NS" rollout status deployment/agent-sandbox-webhook --timeout=120s >/dev/null
}

step "1. Helm 4 upgrades the Helm 3 release"
method
deploy 4 "$changed"; timeout_is 12; method; helmtest 4
rollback "1. Helm 4"; timeout_is 10; method; helmtest 4

step "2. Helm 4 uninstalls the release and installs it afresh"
uninstall
deploy 4; method_is "server-side apply"; helmtest 4
step "2. Helm 4 upgrades its release server-side"
deploy 4 "$changed"; timeout_is 12; method_is "server-side apply"; helmtest 4
rollback "2. Helm 4"; timeout_is 10; method_is "server-side apply"; helmtest 4

# Helm 3 knows no apply method: anything it writes to the release (helm test records its hook's run)
# drops it, and Helm 4 then takes the release for client-side. So Helm 3 comes only now.
step "3. Helm 3 tests the Helm 4 release, then takes it over"
helmtest 3; method
deploy 3 "$changed"; timeout_is 12; method; helmtest 3
step "3. Helm 4 uninstalls it; Helm 3 installs it again"
uninstall
deploy 3; timeout_is 10; method; helmtest 3
step "helm-compat passed"
