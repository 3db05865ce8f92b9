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
