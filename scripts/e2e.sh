#!/usr/bin/env bash
# make e2e: the end-to-end suite on the live cluster (after make up and make deploy): a fresh demo folder
# and the demo workspace applied (scripts/demo-setup.sh), the TypeScript SDK client installed from npm,
# then `go test -tags e2e ./test/e2e/`. Approvals are typed through a pseudo-terminal with the test
# approver key that make deploy creates for automated checks (its passphrase is in a 0600 file), so the
# suite also runs after a demo whose approver key has a passphrase only a person knows. TestE2EHarmfulPlans
# tries a sample of the harmful-plan corpus (test/corpus/harmful; E2E_HARMFUL_ALL=1 for all of it, as make
# verify does), a few minutes more. TestE2EStatelessHTTP starts two `agent-sandbox mcp --http` servers on loopback
# ports behind a listener of its own and plays plan, approval and apply across them.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$AS_ROOT"
export KUBECONFIG=${KUBECONFIG:-$AS_STATE/admin.kubeconfig}
[ -f "$AS_STATE/mcp.kubeconfig" ] || die "the cluster is not deployed; run make deploy first"
DIR=$AS_STATE/e2e
# The policy the webhook enforces: the local cluster's profile's (scripts/lib.sh; make up PROFILE=gke).
POLICY=$(profile_policy)
scripts/demo-setup.sh "$DIR"
(cd test/e2e/node && npm ci --no-audit --no-fund --loglevel=error >/dev/null) || die "npm ci in test/e2e/node failed (the npm registry must be reachable)"
AUDIENCE=$("$(agent_sandbox_bin)" policy get spec.clusterID --policy "$POLICY")
# approve describes saved plans with terraform and the mirrored kubernetes provider.
export AGENT_SANDBOX_TF_PROVIDER_MIRROR=${AGENT_SANDBOX_TF_PROVIDER_MIRROR:-$(dir_tfprovider)}
# The helm the tests upgrade and roll back with: HELM as for make deploy (3, 4 or a path; default the pinned Helm 3).
HELM_BIN=$(helm_bin)
KUBECTL_BIN=$(bin_kube kubectl)
HOST_IP=$(ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p')
export E2E_DIR=$DIR E2E_BINARY=$AS_ROOT/bin/agent-sandbox E2E_POLICY=$POLICY \
  E2E_MCP_KUBECONFIG=$AS_STATE/mcp.kubeconfig E2E_ADMIN_KUBECONFIG=$KUBECONFIG \
  E2E_APPROVER_KEY=$AS_STATE/approver/verify.key E2E_PASSPHRASE_FILE=$AS_STATE/approver/verify-passphrase \
  E2E_APPROVER2_KEY=$AS_STATE/approver/verify2.key E2E_PASSPHRASE2_FILE=$AS_STATE/approver/verify2-passphrase \
  E2E_AUDIENCE=$AUDIENCE E2E_NODE_CLIENT=$AS_ROOT/test/e2e/node \
  E2E_UP="$AS_ROOT/scripts/up.sh" E2E_STATE="$AS_STATE" E2E_HELM="$HELM_BIN" E2E_KUBECTL="$KUBECTL_BIN" \
  E2E_VAULT_CONFIGURE="$AS_ROOT/bin/agent-sandbox vault configure --vault-addr http://127.0.0.1:8200 --vault-token-file $AS_STATE/vault/root-token --kubeconfig $KUBECONFIG --kubernetes-host https://$HOST_IP:6443" \
  E2E_VAULT_STOP="kill \$(cat $AS_STATE/run/vault.pid)" \
  E2E_VAULT_RESTART="$AS_ROOT/scripts/up.sh >/dev/null 2>&1 && $AS_ROOT/bin/agent-sandbox vault configure --policy $POLICY --vault-addr http://127.0.0.1:8200 --vault-token-file $AS_STATE/vault/root-token --kubeconfig $KUBECONFIG --kubernetes-host https://$HOST_IP:6443 >/dev/null"
go test -tags "${E2E_TAGS:-e2e}" -count=1 -timeout "${E2E_TIMEOUT:-40m}" -v ./test/e2e/ "$@"
