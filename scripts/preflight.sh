#!/usr/bin/env bash
# Checks a cluster before agent-sandbox is installed on it (`agent-sandbox preflight`): gVisor really runs,
# NetworkPolicy really drops traffic while the API server, Vault and DNS stay reachable, and the API server
# can call a webhook served by a Pod, and the namespaces the policy's tools deploy into enforce a Pod Security
# level. Against $KUBECONFIG, or the local cluster's admin kubeconfig when it is unset; the runtime class,
# node placement, image, Vault address and target namespaces come from $POLICY (policy/policy.yaml). Extra
# flags go in PREFLIGHT_FLAGS, e.g.
#   KUBECONFIG=~/.kube/gke PREFLIGHT_FLAGS="--image ghcr.io/agent-sandbox/agent-sandbox:v0.3.0 --vault-addr https://10.10.0.5:8200" make preflight
# (--allow-unenforced-namespaces there if a cluster-wide default, not the namespace label, enforces Pod Security).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$AS_ROOT"
if [ -z "${KUBECONFIG:-}" ]; then
  export KUBECONFIG=$AS_STATE/admin.kubeconfig
  [ -r "$KUBECONFIG" ] || die "no KUBECONFIG set and no local cluster ($KUBECONFIG); start one with: make up"
  # The probes run the agent-sandbox image; on the local cluster it is built here, as make deploy does.
  scripts/image-agent-sandbox.sh >&2
  # The local cluster's namespaces, as make up applies them: demo-app enforces Pod Security (labelled again
  # here if an older checkout made it).
  KUBECTL apply -f cluster/manifests/namespaces.yaml >&2
fi
make -s build >/dev/null
# shellcheck disable=SC2086
exec bin/agent-sandbox preflight --policy "${POLICY:-policy/policy.yaml}" ${PREFLIGHT_FLAGS:-}
