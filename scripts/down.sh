#!/usr/bin/env bash
# Stops the local cluster started by scripts/up.sh and removes everything it left on the machine: processes
# (by recorded PID, plus the container shims found by our containerd socket), mounts under the state folder,
# pod network namespaces, the pod bridge, the iptables rules it added, and the state folder itself.
# The build cache ($AS_CACHE) stays.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
need_root "scripts/down.sh" down
export KUBECONFIG=$AS_STATE/admin.kubeconfig
BRIDGE=as-cni0
POD_CIDR=10.244.0.0/24

pidfile() { echo "$AS_STATE/run/$1.pid"; }
alive() { local f; f=$(pidfile "$1"); [ -f "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null; }

# stop NAME: TERM, wait up to 10 s, then KILL; the whole process group (started with setsid).
stop() {
  local f p; f=$(pidfile "$1")
  [ -f "$f" ] || return 0
  p=$(cat "$f")
  if kill -0 "$p" 2>/dev/null; then
    kill -TERM -- "-$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
    if kill -0 "$p" 2>/dev/null; then kill -KILL -- "-$p" 2>/dev/null || kill -KILL "$p" 2>/dev/null; fi
    log "stopped $1 (pid $p)"
  fi
  rm -f "$f"
}

# descendants PID: every descendant of PID, deepest first.
descendants() { local c; for c in $(ps -eo pid=,ppid= | awk -v p="$1" '$2 == p {print $1}'); do descendants "$c"; echo "$c"; done; }

main() {
  [ -d "$AS_STATE" ] || { log "nothing to stop: $AS_STATE does not exist"; cleanup_host; return 0; }
  # Let the kubelet tear pods down properly first: it removes their network namespaces, CNI leases and mounts.
  if alive kubelet && alive kube-apiserver; then
    log "deleting pods"
    KUBECTL delete jobs,pods --all --all-namespaces --wait=false --grace-period=1 >/dev/null 2>&1
    for _ in $(seq 60); do
      [ -z "$(KUBECTL get pods -A --no-headers 2>/dev/null)" ] && break
      sleep 1
    done
  fi
  stop agent-sandbox-webhook
  stop kube-network-policies
  stop kubelet
  stop kube-scheduler
  stop kube-controller-manager
  stop containerd
  # Shims outlive containerd by design; ours are the ones started with our socket path.
  for s in $(ps -eo pid=,args= | awk -v sock="$AS_STATE/run/containerd.sock" '/containerd-shim/ && index($0, sock) {print $1}'); do
    # shellcheck disable=SC2046 # the PIDs are words
    kill -KILL $(descendants "$s") "$s" 2>/dev/null && log "killed leftover shim $s"
  done
  stop vault
  stop kube-apiserver
  stop etcd
  # Anything else still running from our state folder (a sandbox's runsc, a probe).
  for p in $(ps -eo pid=,args= | awk -v st="$AS_STATE/" 'index($0, st) && !/awk/ {print $1}'); do
    [ "$p" = $$ ] || { kill -KILL "$p" 2>/dev/null && log "killed leftover process $p"; }
  done
  sleep 0.5
  cleanup_host
  # Host folders that up created (recorded in host-paths), now that nothing uses them.
  if [ -f "$AS_STATE/host-paths" ]; then
    while read -r p; do [ -n "$p" ] && [ -e "$p" ] && rm -rf "$p"; done < "$AS_STATE/host-paths"
  fi
  rm -rf "$AS_STATE"
  log "local cluster removed (build cache kept in $AS_CACHE)"
}

cleanup_host() {
  # Mounts under the state folder (pod volumes, container root file systems, runsc), deepest first.
  for m in $(awk -v st="$AS_STATE/" 'index($2, st) == 1 {print $2}' /proc/self/mounts | sort -r); do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
  done
  # Pod network namespaces made by containerd for our pods.
  for ns in /run/netns/cni-*; do
    [ -e "$ns" ] || continue
    umount "$ns" 2>/dev/null; rm -f "$ns"
  done
  if ip link show "$BRIDGE" >/dev/null 2>&1; then ip link delete "$BRIDGE" && log "removed bridge $BRIDGE"; fi
  for rule in "POSTROUTING -s $POD_CIDR" "POSTROUTING -d $POD_CIDR" "INPUT -s $POD_CIDR"; do
    # shellcheck disable=SC2086
    while iptables -t mangle -D $rule -m conntrack --ctstate NEW -m comment --comment agent-sandbox -j NFQUEUE --queue-num 100 2>/dev/null; do :; done
  done
  for c in PREROUTING OUTPUT; do
    while rule=$(iptables -t nat -S "$c" 2>/dev/null | grep -- '--comment agent-sandbox' | head -1) && [ -n "$rule" ]; do
      # shellcheck disable=SC2046
      eval iptables -t nat $(echo "$rule" | sed 's/^-A/-D/') || break
    done
  done
  # The kubelet's own chains (KUBE-FIREWALL and its canaries) and the jumps to them; nothing else here
  # creates KUBE-* chains (there is no kube-proxy).
  for ipt in iptables ip6tables; do
    for t in filter nat mangle; do
      "$ipt" -t "$t" -S 2>/dev/null | grep -E -- '^-A .* -j KUBE-(FIREWALL|IPTABLES-HINT|KUBELET-CANARY)$' | while read -r rule; do
        # shellcheck disable=SC2086
        "$ipt" -t "$t" -D ${rule#-A } 2>/dev/null
      done
      for ch in KUBE-FIREWALL KUBE-IPTABLES-HINT KUBE-KUBELET-CANARY; do
        "$ipt" -t "$t" -F "$ch" 2>/dev/null && "$ipt" -t "$t" -X "$ch" 2>/dev/null
      done
    done
  done
  # kube-network-policies' own nftables table, if its start got that far.
  nft list table inet kube-network-policies >/dev/null 2>&1 && nft delete table inet kube-network-policies
  # Files the kubelet and containerd keep at fixed host paths.
  rm -rf /var/lib/cni/results/agent-sandbox-* /var/lib/kubelet/device-plugins/kubelet.sock 2>/dev/null
  rmdir /var/lib/kubelet/device-plugins /var/lib/kubelet 2>/dev/null
  rm -f /var/log/containers/*_agent-sandbox_* /var/log/containers/*_demo-app_* 2>/dev/null
  return 0
}

main "$@"
