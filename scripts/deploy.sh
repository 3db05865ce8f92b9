#!/usr/bin/env bash
# Installs agent-sandbox into the cluster: builds and imports the image (local cluster), installs the Helm
# chart (webhook, sandbox namespace, RBAC, NetworkPolicies) trusting the approvers' public keys, configures
# Vault from the policy, and writes the MCP server's kubeconfig (sandbox namespace only).
#
#   sudo scripts/deploy.sh       the local cluster (make up first; make deploy does). It makes the demo approver
#                                key and the key `make verify`/`make e2e` sign with, and trusts both.
#   KUBECONFIG=... APPROVERS_JWKS=approvers.jwks.json scripts/deploy.sh
#                                another cluster. No approver key is made and nothing here can approve:
#                                only the people whose public keys are in APPROVERS_JWKS can. The image must
#                                be pullable there (IMAGE=...); VAULT_ADDR/VAULT_TOKEN (or VAULT_TOKEN_FILE)
#                                point at its Vault (VAULT_NAMESPACE for Vault Enterprise / HCP Vault);
#                                API_SERVER_URL/API_CIDR say how sandbox Pods reach the API server,
#                                VAULT_POD_ADDR/VAULT_CIDR how they reach Vault. docs/install.md walks through it.
#
#   API_CIDR, VAULT_CIDR         comma-separated lists (an EKS control plane has several endpoints). VAULT_CIDR=none
#                                leaves the egress to Vault to HELM_VALUES (networkPolicy.extraEgress, an
#                                in-cluster Vault).
#   HELM_VALUES=a.yaml,b.yaml    more values files for the chart (GKE's sandbox.nodeSelector/tolerations, say).
#   The local cluster's profile (make up PROFILE=gke, recorded by make up; scripts/lib.sh) picks the policy:
#   policy/policy.yaml, or for gke that policy placed on the GKE-shaped node ($AS_STATE/policy-gke.yaml), whose
#   node selector and tolerations the chart then sets on the webhook's policy (sandbox.nodeSelector and
#   sandbox.tolerations) and whose tolerations the webhook Pods get (webhook.tolerations: they run on the one,
#   tainted, node).
#   VAULT_CONFIGURE_FLAGS        more flags for `agent-sandbox vault configure` (--allow-unenforced-namespaces, say).
#                                vault configure refuses a target namespace of the policy's tools that enforces
#                                no Pod Security level: label it (kubectl label ns demo-app
#                                pod-security.kubernetes.io/enforce=baseline) or, if a cluster-wide default
#                                protects it, add --allow-unenforced-namespaces here. The local cluster's demo-app
#                                is labelled by cluster/manifests/namespaces.yaml, applied again before configure.
#   CHART=dist/charts/agent-sandbox-VERSION.tgz
#                                install a packaged release (make release) instead of charts/agent-sandbox: its
#                                values name its own images (by digest), so IMAGE is not used; on the local
#                                cluster they are imported from RELEASE_DIR (default dist/) first.
#   HELM=4                       install with the pinned Helm 4 instead of the pinned Helm 3 (HELM=3, the default), or
#   HELM=/path/to/helm           with that binary (Helm 3 or 4). Helm 4 installs a new release with server-side
#                                apply and keeps the method a release was installed with on upgrade; docs/install.md
#                                says what differs.
#   DEPLOY_DRY_RUN=1             print the plan (keys made, approver keys trusted, MCP kubeconfig paths, the
#                                helm arguments) and stop before building images, or touching the cluster or
#                                Vault. It builds only the agent-sandbox command, which reads the policy and the
#                                key sets (AGENT_SANDBOX_BIN=path uses one built already).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
# Paths given in variables are relative to where deploy was started, not to the repository.
abs() { case $1 in ''|/*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
for v in KUBECONFIG APPROVERS_JWKS VAULT_TOKEN_FILE MCP_KUBECONFIG CHART RELEASE_DIR; do
  [ -n "${!v:-}" ] && printf -v "$v" '%s' "$(abs "${!v}")"
done
case ${HELM:-} in */*) HELM=$(abs "$HELM") ;; esac
values_files=()
IFS=, read -r -a vf <<< "${HELM_VALUES:-}"
for f in "${vf[@]}"; do [ -n "$f" ] && values_files+=("$(abs "$f")"); done
cd "$AS_ROOT"

DRY_RUN=${DEPLOY_DRY_RUN:-0}
LOCAL=0
if [ -z "${KUBECONFIG:-}" ] || [ "$KUBECONFIG" = "$AS_STATE/admin.kubeconfig" ]; then LOCAL=1; export KUBECONFIG=$AS_STATE/admin.kubeconfig; fi
RELEASE_NS=${RELEASE_NS:-agent-sandbox-system}
KEYS=$AS_STATE/approver
# The chart: the repository's folder (the dev image, built here), or a packaged release whose values already
# name its images.
CHART=${CHART:-$AS_ROOT/charts/agent-sandbox}
RELEASE_DIR=${RELEASE_DIR:-$AS_ROOT/dist}
[ -e "$CHART" ] || die "CHART=$CHART does not exist (make release writes dist/charts/agent-sandbox-*.tgz)"

# The helm to install with: checked now (a wrong HELM fails before anything is done), built after the plan.
case ${HELM:-3} in
  3|v3) HELM_PLAN="the pinned Helm 3 ($HELM_VERSION)"; HELM_BIN= ;;
  4|v4) HELM_PLAN="the pinned Helm 4 ($HELM4_VERSION)"; HELM_BIN= ;;
  *) HELM_BIN=$(helm_bin); HELM_PLAN="$HELM_BIN ($("$HELM_BIN" version --template '{{.Version}}'))" ;;
esac

# The person the MCP kubeconfig is for: the one who ran sudo, else whoever runs this.
CLIENT_USER=$(sudo_user)

approvers_help="On a cluster other than the local one, deploy makes no approver key and trusts only the public keys you give it, so that nothing but a person can approve. Each approver makes a key on their own machine with \`agent-sandbox keygen\` (it asks for a passphrase and writes ~/.config/agent-sandbox/approver.key, which never leaves that machine, and its public half ~/.config/agent-sandbox/approver.key.jwks.json) and sends you the .jwks.json file; put all of them in one JWK set with \`jq -s '{keys: map(.keys[])}' alice.jwks.json bob.jwks.json > approvers.jwks.json\` and run again with APPROVERS_JWKS=approvers.jwks.json."

# check_jwks FILE: a JWK set of Ed25519 public keys, each with a unique key ID, and no private part: what the
# webhook will trust, checked by the code that trusts it (agent-sandbox keys check says what is wrong).
check_jwks() { "$BIN" keys check "$1" >/dev/null || die "APPROVERS_JWKS=$1 is not a JWK set of approver public keys. $approvers_help"; }
jwks_ids() { "$BIN" keys ids --separator ", " "$1"; }

if ((LOCAL)); then
  if ((!DRY_RUN)); then
    need_root "make deploy (local cluster)" deploy
    [ -f "$AS_STATE/admin.kubeconfig" ] || die "the local cluster is not up; run: make up"
  fi
  HOST_IP=$(ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p')
  API_SERVER_URL=${API_SERVER_URL:-https://$HOST_IP:6443}
  API_CIDR=${API_CIDR:-$HOST_IP/32}
  VAULT_POD_ADDR=${VAULT_POD_ADDR:-http://10.244.0.1:8200}
  VAULT_CIDR=${VAULT_CIDR:-10.244.0.1/32}
  export VAULT_ADDR=${VAULT_ADDR:-http://127.0.0.1:8200}
  VAULT_TOKEN_FILE=${VAULT_TOKEN_FILE:-$AS_STATE/vault/root-token}
  # The demo approver (a person types its passphrase, or in an unattended run the demo's pseudo-terminal
  # driver does) and the keys make verify and make e2e sign corpus tokens with (two, for the two-person
  # rule: distinct approvers). They exist only here.
  MAKE_KEYS=()
  for k in approver verify verify2; do [ -f "$KEYS/$k.key" ] || MAKE_KEYS+=("$k"); done
  TRUSTED_JWKS=$KEYS/trusted.jwks.json
  MCP_KC=${MCP_KUBECONFIG:-$AS_STATE/mcp.kubeconfig}
  MCP_KC_OWNER=root
  # ... and a copy for the person who ran sudo, where `agent-sandbox mcp` looks by default.
  USER_KC=
  if [ -n "$CLIENT_USER" ]; then USER_KC=$(client_config_dir "$CLIENT_USER")/mcp.kubeconfig; fi
else
  : "${API_SERVER_URL:?set API_SERVER_URL (the API server as sandbox Pods reach it)}" "${API_CIDR:?set API_CIDR}"
  : "${VAULT_POD_ADDR:?set VAULT_POD_ADDR (Vault as sandbox Pods reach it)}" "${VAULT_CIDR:?set VAULT_CIDR (or none, with HELM_VALUES)}" "${VAULT_ADDR:?set VAULT_ADDR}"
  for f in "${values_files[@]}"; do [ -f "$f" ] || die "HELM_VALUES: no such file: $f"; done
  VAULT_TOKEN_FILE=${VAULT_TOKEN_FILE:-}
  [ -n "${APPROVERS_JWKS:-}" ] || die "APPROVERS_JWKS is not set. $approvers_help"
  [ -f "$APPROVERS_JWKS" ] || die "APPROVERS_JWKS=$APPROVERS_JWKS: no such file. $approvers_help"
  MAKE_KEYS=()
  TRUSTED_JWKS=$APPROVERS_JWKS
  MCP_KC=${MCP_KUBECONFIG:-$(client_config_dir)/mcp.kubeconfig}
  MCP_KC_OWNER=${CLIENT_USER:-}
  USER_KC=
fi
IMAGE=${IMAGE:-localhost/agent-sandbox:dev}

# The agent-sandbox command reads the policy and the key sets (and, below, makes keys and configures Vault).
BIN=$(agent_sandbox_bin)
((LOCAL)) || check_jwks "$APPROVERS_JWKS"
# The policy: policy/policy.yaml, or on the local cluster the one its profile runs (derived from it).
POLICY=$AS_ROOT/policy/policy.yaml
((LOCAL)) && POLICY=$(profile_policy)
POLICY_NAME=${POLICY#"$AS_ROOT"/}
LOCAL_PROFILE=
((LOCAL)) && LOCAL_PROFILE=$(as_profile)
SANDBOX_NS=$("$BIN" policy get spec.sandbox.namespace --policy "$POLICY")

# url_port URL: the port of an http(s) URL, explicit or the scheme's (an EKS endpoint has none).
url_port() {
  local hostport=${1#*://}; hostport=${hostport%%/*}
  case $hostport in
    *\]:*|[!\[]*:*) echo "${hostport##*:}" ;;
    *) case $1 in https://*) echo 443 ;; *) echo 80 ;; esac ;;
  esac
}
set_args=()
for f in "${values_files[@]}"; do set_args+=(-f "$f"); done
# A packaged release chart names its own images (by digest); the chart folder runs IMAGE.
[ -d "$CHART" ] && set_args+=(--set "image.repository=${IMAGE%:*}" --set "image.tag=${IMAGE##*:}")
set_args+=(--set "apiServer.url=$API_SERVER_URL")
IFS=, read -r -a cidrs <<< "$API_CIDR"
for i in "${!cidrs[@]}"; do
  set_args+=(--set "apiServer.endpoints[$i].cidr=${cidrs[$i]}" --set "apiServer.endpoints[$i].port=$(url_port "$API_SERVER_URL")")
done
set_args+=(--set "vault.address=$VAULT_POD_ADDR")
if [ "$VAULT_CIDR" = none ]; then
  ((${#values_files[@]})) || die "VAULT_CIDR=none leaves the egress to Vault to a values file, but HELM_VALUES names none"
  set_args+=(--set-json "vault.egress=[]")
else
  IFS=, read -r -a cidrs <<< "$VAULT_CIDR"
  for i in "${!cidrs[@]}"; do
    set_args+=(--set "vault.egress[$i].cidr=${cidrs[$i]}" --set "vault.egress[$i].port=$(url_port "$VAULT_POD_ADDR")")
  done
fi
set_args+=(--set-file "approvers.jwks=$TRUSTED_JWKS")
[ -n "${VAULT_NAMESPACE:-}" ] && set_args+=(--set "vault.namespace=${VAULT_NAMESPACE}")
# The local cluster creates the sandbox namespace itself (cluster/manifests), so the chart must not own it.
((LOCAL)) && set_args+=(--set sandbox.createNamespace=false)
# A profile's placement (gke): the chart puts it on the policy the webhook enforces, which is then the policy
# the MCP server and make verify read; the webhook's own Pods tolerate the sandbox taint of the one node.
if ((LOCAL)) && [ "$POLICY" != "$AS_ROOT/policy/policy.yaml" ]; then
  for f in nodeSelector tolerations; do
    v=$("$BIN" policy get "spec.sandbox.$f" --policy "$POLICY" 2>/dev/null) || continue
    set_args+=(--set-json "sandbox.$f=$v")
    [ "$f" = tolerations ] && set_args+=(--set-json "webhook.tolerations=$v")
  done
fi

{
  echo "deploy plan$( ((DRY_RUN)) && echo " (dry run: nothing is built, and neither the cluster nor Vault is touched)"):"
  if ((LOCAL)); then echo "  cluster:            the local cluster ($KUBECONFIG)"; else echo "  cluster:            $KUBECONFIG (not the local cluster)"; fi
  echo "  policy:             $POLICY_NAME${LOCAL_PROFILE:+ (profile $LOCAL_PROFILE)}"
  echo "  sandbox namespace:  $SANDBOX_NS (spec.sandbox.namespace of $POLICY_NAME)"
  if ((${#MAKE_KEYS[@]})); then
    for k in "${MAKE_KEYS[@]}"; do echo "  approver key:       create $KEYS/$k.key (local cluster only)"; done
  else
    echo "  approver key:       none created"
  fi
  if ((LOCAL)); then
    echo "  trusted approvers:  $TRUSTED_JWKS (the demo approver and the two make verify/e2e keys of this machine)"
  else
    echo "  trusted approvers:  $TRUSTED_JWKS (keys: $(jwks_ids "$TRUSTED_JWKS")); nothing else can approve"
  fi
  if ((LOCAL)); then
    echo "  target namespaces:  apply cluster/manifests/namespaces.yaml (demo-app enforces Pod Security baseline)"
  else
    echo "  target namespaces:  left as they are; vault configure refuses one that enforces no Pod Security level"
  fi
  echo "  vault:              configure $VAULT_ADDR${VAULT_NAMESPACE:+ (namespace $VAULT_NAMESPACE)} from $POLICY_NAME${VAULT_CONFIGURE_FLAGS:+ $VAULT_CONFIGURE_FLAGS}"
  echo "  MCP kubeconfig:     $MCP_KC${MCP_KC_OWNER:+ (owner $MCP_KC_OWNER)}"
  [ -n "$USER_KC" ] && echo "  MCP kubeconfig:     $USER_KC (owner $CLIENT_USER)"
  echo "  helm:               $HELM_PLAN"
  printf '  helm:               upgrade --install agent-sandbox %s -n %s --create-namespace' "${CHART#"$AS_ROOT"/}" "$RELEASE_NS"
  printf ' %q' "${set_args[@]}"; echo
} >&2
((DRY_RUN)) && exit 0

[ -n "$HELM_BIN" ] || HELM_BIN=$(helm_bin)
# Another cluster needs no local Kubernetes build: kubectl from PATH serves.
if ! [ -x "$(bin_kube kubectl)" ]; then
  command -v kubectl >/dev/null || die "kubectl is needed: put it on PATH (or build the local cluster's with make tools)"
  KUBECTL() { kubectl "$@"; }
fi
if ((LOCAL)); then
  if [ -d "$CHART" ]; then "$AS_ROOT/scripts/image-agent-sandbox.sh"; else "$AS_ROOT/scripts/release-import.sh" "$RELEASE_DIR"; fi
fi

# Approver keys (local cluster only: MAKE_KEYS is empty elsewhere). The demo approver's passphrase is chosen
# at the terminal when there is one; an unattended run (CI) gets a generated test passphrase kept in a 0600
# file, which only the demo's pseudo-terminal driver reads. The verify key's passphrase is always in a file:
# make verify and make e2e sign corpus tokens with it.
if ((LOCAL)); then
  mkdir -p "$KEYS"; chmod 700 "$KEYS"
  for k in "${MAKE_KEYS[@]}"; do
    pf=
    if [ "$k" = verify ] || [ "$k" = verify2 ]; then
      pf=$KEYS/$k-passphrase
    elif ! [ -t 0 ] || [ -n "${CI:-}" ]; then
      pf=$KEYS/test-passphrase
      log "created the demo approver key with a test passphrase ($pf): this run has no terminal"
    else
      log "creating the demo approver key: choose its passphrase (you will type it to approve)"
    fi
    if [ -n "$pf" ]; then
      [ -f "$pf" ] || (umask 077; openssl rand -hex 16 > "$pf")
      "$BIN" keygen --key-id "$k" --out "$KEYS/$k.key" --public-out "$KEYS/$k.jwks.json" --passphrase-file "$pf" >/dev/null
    else
      "$BIN" keygen --key-id "$k" --out "$KEYS/$k.key" --public-out "$KEYS/$k.jwks.json"
    fi
  done
  "$BIN" keys merge --out "$TRUSTED_JWKS" "$KEYS/approver.jwks.json" "$KEYS/verify.jwks.json" "$KEYS/verify2.jwks.json"
fi

log "installing the Helm chart (release agent-sandbox in $RELEASE_NS) with helm $("$HELM_BIN" version --template '{{.Version}}')"
# The same arguments serve Helm 3 and Helm 4: --wait is Helm 3's readiness check and Helm 4's status watcher
# (kstatus); Helm 4 applies server-side on a new install and keeps a release's apply method on upgrade.
"$HELM_BIN" upgrade --install agent-sandbox "$CHART" -n "$RELEASE_NS" --create-namespace "${set_args[@]}" \
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

# vault configure refuses target namespaces that enforce no Pod Security level. The local cluster's come from
# the same manifest make up applies; applying it again labels a demo-app made by an older checkout.
if ((LOCAL)); then
  KUBECTL apply -f cluster/manifests/namespaces.yaml >&2
fi
log "configuring Vault from the policy"
vault_args=(--policy "$POLICY" --vault-addr "$VAULT_ADDR" --kubeconfig "$KUBECONFIG")
[ -n "$VAULT_TOKEN_FILE" ] && vault_args+=(--vault-token-file "$VAULT_TOKEN_FILE")
((LOCAL)) && vault_args+=(--kubernetes-host "$API_SERVER_URL")
# shellcheck disable=SC2206 # VAULT_CONFIGURE_FLAGS is a list of flags, split on spaces
vault_args+=(${VAULT_CONFIGURE_FLAGS:-})
"$BIN" vault configure "${vault_args[@]}"

# The MCP server's identity: a token for the agent-sandbox-mcp ServiceAccount, bound by the chart's Role to
# the sandbox namespace (create Jobs and ConfigMaps, read Jobs, Pods and logs; no secrets, no exec).
refresh=("$BIN" kubeconfig refresh --kubeconfig "$KUBECONFIG" --policy "$POLICY")
"${refresh[@]}" --out "$MCP_KC" ${MCP_KC_OWNER:+--owner "$MCP_KC_OWNER"} >&2
[ -n "$USER_KC" ] && "${refresh[@]}" --out "$USER_KC" --owner "$CLIENT_USER" >&2
if ((LOCAL)); then
  log "the MCP kubeconfig lasts 24 h; refresh it with: sudo ~/.local/bin/agent-sandbox kubeconfig refresh --kubeconfig $KUBECONFIG --policy ~/.config/agent-sandbox/policy.yaml (after make install-client), or run make deploy again"
else
  log "the MCP kubeconfig lasts 24 h; refresh it with: agent-sandbox kubeconfig refresh --kubeconfig $KUBECONFIG --policy $AS_ROOT/policy/policy.yaml --out $MCP_KC"
fi
