#!/usr/bin/env bash
# make helm-test: the chart's own test on the installed release (templates/tests/webhook-test.yaml: one Pod in
# the release namespace runs `agent-sandbox check-install`, which checks that the webhook Service answers TLS
# for its name and that the API server refuses an unsafe Job through the webhook), and prints the Pod's log.
# HELM picks the helm as for make deploy (3, the default; 4; or a path); either tests a release installed by
# either. KUBECONFIG defaults to the local cluster's; RELEASE_NS to agent-sandbox-system.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
case ${HELM:-} in [!/]*/*) HELM=$PWD/$HELM ;; esac   # a relative path, from where make was run
export KUBECONFIG=${KUBECONFIG:-$AS_STATE/admin.kubeconfig}
[ -f "$KUBECONFIG" ] || die "KUBECONFIG=$KUBECONFIG: no such file; run make up && make deploy first, or point KUBECONFIG at the cluster"
RELEASE_NS=${RELEASE_NS:-agent-sandbox-system}
HELM_BIN=$(helm_bin)
log "helm test agent-sandbox -n $RELEASE_NS with helm $("$HELM_BIN" version --template '{{.Version}}')"
"$HELM_BIN" test agent-sandbox -n "$RELEASE_NS" --logs --timeout 3m
