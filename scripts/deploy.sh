#!/usr/bin/env bash
# Installs agent-sandbox into the cluster: builds and imports the image (local cluster), makes the approver
# keys if there are none, installs the Helm chart (webhook, sandbox namespace, RBAC, NetworkPolicies),
# configures Vault from the policy, and writes the MCP server's kubeconfig (sandbox namespace only).
#
#   scripts/deploy.sh            the local cluster (make up first; make deploy does)
#   KUBECONFIG=... scripts/deploy.sh   another cluster: the image must already be pullable there (IMAGE=...),
#                                      VAULT_ADDR/VAULT_TOKEN point at its Vault, API_SERVER_URL is how
#                                      sandbox Pods reach the API server, VAULT_POD_ADDR how they reach Vault.
#   CHART=dist/charts/agent-sandbox-VERSION.tgz scripts/deploy.sh
#                                      install a packaged release chart (make release) with its own images,
#                                      which on the local cluster are imported from dist/ (RELEASE_DIR)
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$AS_ROOT"

LOCAL=0
if [ -z "${KUBECONFIG:-}" ] || [ "$KUBECONFIG" = "$AS_STATE/admin.kubeconfig" ]; then LOCAL=1; export KUBECONFIG=$AS_STATE/admin.kubeconfig; fi
RELEASE_NS=${RELEASE_NS:-agent-sandbox-system}
SANDBOX_NS=$(awk '/^  sandbox:/{s=1} s && /namespace:/{print $2; exit}' policy/policy.yaml)
KEYS=$AS_STATE/approver
# The chart: the repository's folder (the dev image, built here), or a packaged release whose values already
# name its images.
CHART=${CHART:-charts/agent-sandbox}
RELEASE_DIR=${RELEASE_DIR:-$AS_ROOT/dist}
[ -e "$CHART" ] || die "CHART=$CHART does not exist (make release writes dist/charts/agent-sandbox-*.tgz)"
"$AS_ROOT/scripts/build-tools.sh" helm >&2
HELM=$(bin_helm)

if ((LOCAL)); then
  need_root "make deploy (local cluster)" deploy
  [ -f "$AS_STATE/admin.kubeconfig" ] || die "the local cluster is not up; run: make up"
  HOST_IP=$(ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p')
  API_SERVER_URL=${API_SERVER_URL:-https://$HOST_IP:6443}
  API_CIDR=${API_CIDR:-$HOST_IP/32}
  VAULT_POD_ADDR=${VAULT_POD_ADDR:-http://10.244.0.1:8200}
  VAULT_CIDR=${VAULT_CIDR:-10.244.0.1/32}
  export VAULT_ADDR=${VAULT_ADDR:-http://127.0.0.1:8200}
  VAULT_TOKEN_FILE=${VAULT_TOKEN_FILE:-$AS_STATE/vault/root-token}
  if [ -d "$CHART" ]; then "$AS_ROOT/scripts/image-agent-sandbox.sh"; else "$AS_ROOT/scripts/release-import.sh" "$RELEASE_DIR"; fi
else
  : "${API_SERVER_URL:?set API_SERVER_URL (the API server as sandbox Pods reach it)}" "${API_CIDR:?set API_CIDR}"
  : "${VAULT_POD_ADDR:?set VAULT_POD_ADDR (Vault as sandbox Pods reach it)}" "${VAULT_CIDR:?set VAULT_CIDR}" "${VAULT_ADDR:?set VAULT_ADDR}"
  VAULT_TOKEN_FILE=${VAULT_TOKEN_FILE:-}
fi
IMAGE=${IMAGE:-localhost/agent-sandbox:dev}

# Approver keys. The demo approver's passphrase is chosen at the terminal when there is one; an unattended
# run (CI) gets a generated test passphrase kept in a 0600 file, which only the demo's pseudo-terminal
# driver reads. A second key, used only by `make verify` to sign corpus tokens, is trusted too.
mkdir -p "$KEYS"; chmod 700 "$KEYS"
BIN=$AS_CACHE/agent-sandbox-bin
(CGO_ENABLED=0 go build -trimpath -o "$BIN" ./cmd/agent-sandbox)
keygen() { # NAME [passphrase-file]
  local name=$1 pf=${2:-}
  [ -f "$KEYS/$name.key" ] && return
  if [ -z "$pf" ]; then
    "$BIN" keygen --key-id "$name" --out "$KEYS/$name.key" --public-out "$KEYS/$name.jwks.json"
  else
    "$BIN" keygen --key-id "$name" --out "$KEYS/$name.key" --public-out "$KEYS/$name.jwks.json" --passphrase-file "$pf" >/dev/null
  fi
}
if [ ! -f "$KEYS/approver.key" ]; then
  if [ -t 0 ] && [ -z "${CI:-}" ]; then
    log "creating the demo approver key: choose its passphrase (you will type it to approve)"
    keygen approver
  else
    (umask 077; openssl rand -hex 16 > "$KEYS/test-passphrase")
    keygen approver "$KEYS/test-passphrase"
    log "created the demo approver key with a test passphrase ($KEYS/test-passphrase): this run has no terminal"
  fi
fi
[ -f "$KEYS/verify-passphrase" ] || (umask 077; openssl rand -hex 16 > "$KEYS/verify-passphrase")
keygen verify "$KEYS/verify-passphrase"
python3 - "$KEYS/approver.jwks.json" "$KEYS/verify.jwks.json" > "$KEYS/trusted.jwks.json" <<'PY'
import json, sys
keys = []
for f in sys.argv[1:]:
    keys += json.load(open(f))["keys"]
print(json.dumps({"keys": keys}))
PY

log "installing the Helm chart (release agent-sandbox in $RELEASE_NS)"
set_args=(--set "apiServer.url=$API_SERVER_URL" --set "apiServer.endpoints[0].cidr=$API_CIDR" --set "apiServer.endpoints[0].port=${API_SERVER_URL##*:}"
  --set "vault.address=$VAULT_POD_ADDR" --set "vault.egress[0].cidr=$VAULT_CIDR" --set "vault.egress[0].port=${VAULT_POD_ADDR##*:}"
  --set-file "approvers.jwks=$KEYS/trusted.jwks.json")
# A packaged release chart names its own images (by digest); the chart folder runs IMAGE.
[ -d "$CHART" ] && set_args+=(--set "image.repository=${IMAGE%:*}" --set "image.tag=${IMAGE##*:}")
# The local cluster creates the sandbox namespace itself (cluster/manifests), so the chart must not own it.
((LOCAL)) && set_args+=(--set sandbox.createNamespace=false)
"$HELM" upgrade --install agent-sandbox "$CHART" -n "$RELEASE_NS" --create-namespace "${set_args[@]}" \
  --wait --timeout 3m 2>&1 | sed '/found symbolic link/d' >&2
KUBECTL -n "$RELEASE_NS" rollout restart deployment/agent-sandbox-webhook >/dev/null
KUBECTL -n "$RELEASE_NS" rollout status deployment/agent-sandbox-webhook --timeout=120s >&2
# Warm Pods started before this deploy run the image that was under the same tag then; the pool starts new
# ones from the image just imported.
KUBECTL -n "$SANDBOX_NS" delete jobs -l agent-sandbox.dev/warm --wait=false >/dev/null 2>&1 || true

# The webhook injects its CA into the configurations; until then the API server cannot call it and every
# sandbox Job is refused (fail closed).
for _ in $(seq 60); do
  ca=$(KUBECTL get validatingwebhookconfiguration agent-sandbox -o jsonpath='{.webhooks[0].clientConfig.caBundle}' 2>/dev/null)
  [ -n "$ca" ] && break; sleep 1
done
[ -n "$ca" ] || die "the webhook did not inject its CA into the webhook configurations; see: kubectl -n $RELEASE_NS logs deploy/agent-sandbox-webhook"
log "webhook ready"

log "configuring Vault from the policy"
vault_args=(--policy policy/policy.yaml --vault-addr "$VAULT_ADDR" --kubeconfig "$KUBECONFIG")
[ -n "$VAULT_TOKEN_FILE" ] && vault_args+=(--vault-token-file "$VAULT_TOKEN_FILE")
((LOCAL)) && vault_args+=(--kubernetes-host "$API_SERVER_URL")
"$BIN" vault configure "${vault_args[@]}"

# The MCP server's identity: a token for the agent-sandbox-mcp ServiceAccount, bound by the chart's Role to
# the sandbox namespace (create Jobs and ConfigMaps, read Jobs, Pods and logs; no secrets, no exec).
MCP_KC=${MCP_KUBECONFIG:-$AS_STATE/mcp.kubeconfig}
server=$(KUBECTL config view --minify -o jsonpath='{.clusters[0].cluster.server}')
token=$(KUBECTL -n "$SANDBOX_NS" create token agent-sandbox-mcp --duration=24h)
ca_file=$(mktemp); trap 'rm -f "$ca_file"' EXIT
KUBECTL config view --minify --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}' | base64 -d > "$ca_file"
rm -f "$MCP_KC"
(umask 077
 KUBECTL config set-cluster sandbox --server="$server" --certificate-authority="$ca_file" --embed-certs --kubeconfig="$MCP_KC" >/dev/null
 KUBECTL config set-credentials agent-sandbox-mcp --token="$token" --kubeconfig="$MCP_KC" >/dev/null
 KUBECTL config set-context sandbox --cluster=sandbox --user=agent-sandbox-mcp --namespace="$SANDBOX_NS" --kubeconfig="$MCP_KC" >/dev/null
 KUBECTL config use-context sandbox --kubeconfig="$MCP_KC" >/dev/null)
unset token
log "MCP server kubeconfig (sandbox namespace only, 24 h): $MCP_KC"
