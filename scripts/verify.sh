#!/usr/bin/env bash
# make verify: proves on the live cluster that sandboxes are isolated (verify-cluster: gVisor kernel,
# NetworkPolicy egress), that the chart's `helm test` passes (scripts/helm-test.sh, with the helm HELM picks as
# for make deploy) and that admission rejects every unsafe object of the adversarial corpus while it
# admits and mutates the safe Job, and (section 4) that malicious Terraform workspaces and a forged approved
# saved plan, submitted straight to the cluster as the MCP server, are refused before any credential
# (VERIFY_ALL_WORKSPACES=1: the whole corpus, ~15 min; default: a sample of every trick). Needs `make
# deploy` first. Section 3 includes the warm-pool twins: forged, edited, doubled and replayed claims, warm Jobs
# not made by the pool, and one real claim, and the webhook configurations attacked as the webhook's ServiceAccount
# by an edit user of the release namespace (the chart's admission policy refuses all but a new caBundle). Section 5 (scripts/verify-plans, issue 21): the harmful-plan corpus,
# workspaces the allowlist admits that deploy harm, each refused by a plan rule at terraform_plan (a real MCP
# client), in the apply sandbox before the credential (its saved plan approved and submitted as the MCP server)
# and on the approval screen; it applies the demo workspace first (scripts/demo-setup.sh), against whose state
# the plans are made (VERIFY_PLANS=a,b: only those cases). Exits non-zero on any FAIL.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
cd "$AS_ROOT" || exit 1
export KUBECONFIG=${KUBECONFIG:-$AS_STATE/admin.kubeconfig}
[ -f "$AS_STATE/approver/verify-passphrase" ] && [ -f "$AS_STATE/mcp.kubeconfig" ] ||
  die "the local cluster is not deployed (no verify approver key or MCP kubeconfig in $AS_STATE); run make up && make deploy first"
# The policy the webhook enforces: the local cluster's profile's (scripts/lib.sh; make up PROFILE=gke).
POLICY=$(profile_policy) || exit 1
rc=0
scripts/verify-cluster.sh || rc=1
# The chart's own helm test (check-install), with the helm make deploy used (HELM).
scripts/helm-test.sh || rc=1
go run ./scripts/verify-admission --kubeconfig "$KUBECONFIG" --policy "$POLICY" \
  --key "$AS_STATE/approver/verify.key" --passphrase-file "$AS_STATE/approver/verify-passphrase" \
  --key2 "$AS_STATE/approver/verify2.key" --passphrase2-file "$AS_STATE/approver/verify2-passphrase" \
  --vault-addr "${VAULT_ADDR:-http://127.0.0.1:8200}" --sa-signing-key "$AS_STATE/pki/sa.key" ${VERBOSE:+-v} \
  ${VERIFY_ALL_WORKSPACES:+-all-workspaces} || rc=1
if scripts/demo-setup.sh "$AS_STATE/verify-plans" >/dev/null; then
  go run ./scripts/verify-plans --kubeconfig "$KUBECONFIG" --mcp-kubeconfig "$AS_STATE/mcp.kubeconfig" --policy "$POLICY" \
    --binary bin/agent-sandbox --key "$AS_STATE/approver/verify.key" --passphrase-file "$AS_STATE/approver/verify-passphrase" \
    --provider-mirror "$(dir_tfprovider)" ${VERIFY_PLANS:+--only "$VERIFY_PLANS"} || rc=1
else
  echo "== 5. Harmful plans =="
  echo "  FAIL: the demo workspace could not be applied (scripts/demo-setup.sh), so no harmful plan was tried"
  rc=1
fi
exit $rc
