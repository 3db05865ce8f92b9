#!/usr/bin/env bash
# Shows the state of every component of the local cluster: running (with PID), stopped, or crashed (a PID
# file whose process is gone), and where its log is.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
if [ ! -d "$AS_STATE" ]; then echo "local cluster: not created (run: make up)"; exit 0; fi
printf '%-26s %-9s %-8s %s\n' COMPONENT STATE PID LOG
for c in etcd kube-apiserver containerd kube-controller-manager kube-scheduler kubelet kube-network-policies vault agent-sandbox-webhook; do
  f=$AS_STATE/run/$c.pid
  if [ ! -f "$f" ]; then state=stopped pid=-
  elif kill -0 "$(cat "$f")" 2>/dev/null; then state=running pid=$(cat "$f")
  else state=crashed pid=$(cat "$f"); fi
  printf '%-26s %-9s %-8s %s\n' "$c" "$state" "$pid" "$AS_STATE/logs/$c.log"
done
if [ -f "$AS_STATE/admin.kubeconfig" ] && curl -sk --max-time 2 https://127.0.0.1:6443/readyz >/dev/null 2>&1; then
  echo; KUBECONFIG=$AS_STATE/admin.kubeconfig KUBECTL get nodes -o wide 2>&1
fi
# The warm pools (docs/design/warm-pool.md): per tool, warm Pods by state, and who keeps them.
if [ -f "$AS_STATE/admin.kubeconfig" ] && curl -sk --max-time 2 https://127.0.0.1:6443/readyz >/dev/null 2>&1; then
  export KUBECONFIG=$AS_STATE/admin.kubeconfig
  echo; echo "warm pools (policy tools[].warmPool; kept by the webhook replica holding the Lease):"
  KUBECTL -n agent-sandbox get pods -l agent-sandbox.dev/warm=true --no-headers \
    -o custom-columns='TOOL:.metadata.labels.agent-sandbox\.dev/tool,PHASE:.status.phase,CLAIM:.metadata.annotations.agent-sandbox\.dev/claim' 2>/dev/null |
    awk '{ s = ($3 != "<none>") ? "claimed" : ($2 == "Running" ? "idle/starting" : tolower($2)); n[$1" "s]++ }
         END { if (length(n) == 0) print "  none"; for (k in n) { split(k, a, " "); printf "  %-28s %-14s %d\n", a[1], a[2], n[k] } }'
  holder=$(KUBECTL -n agent-sandbox-system get lease agent-sandbox-warm-pool -o jsonpath='{.spec.holderIdentity}' 2>/dev/null)
  echo "  pool kept by: ${holder:-nobody (webhook not deployed, or --warm-pool=false)}"
fi
