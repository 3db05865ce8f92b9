#!/usr/bin/env bash
# Checks that `make down` left nothing of the local cluster behind: no process, mount, network namespace,
# bridge, iptables rule, nftables table, listening port or state folder. Exits 1 naming each leftover.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
bad=0
leftover() { echo "LEFTOVER: $*"; bad=1; }

procs=$(ps -eo pid=,args= | awk -v st="$AS_STATE/" -v ca="$AS_CACHE/tools/" '(index($0, st) || index($0, ca)) && !/awk/ {print}')
[ -z "$procs" ] || leftover "processes:"$'\n'"$procs"
mnts=$(awk -v st="$AS_STATE/" 'index($2, st) == 1 {print $2}' /proc/self/mounts)
[ -z "$mnts" ] || leftover "mounts: $mnts"
ls /run/netns/cni-* >/dev/null 2>&1 && leftover "network namespaces: $(ls /run/netns/cni-* | tr '\n' ' ')"
ip link show as-cni0 >/dev/null 2>&1 && leftover "bridge as-cni0"
veths=$(ip -o link show type veth 2>/dev/null | awk -F': ' '{print $2}')
[ -z "$veths" ] || leftover "veth interfaces: $veths"
rules=$( (iptables-save; ip6tables-save) 2>/dev/null | grep -E 'agent-sandbox|NFQUEUE|CNI-|KUBE-' || true)
[ -z "$rules" ] || leftover "iptables rules:"$'\n'"$rules"
nft list table inet kube-network-policies >/dev/null 2>&1 && leftover "nftables table inet kube-network-policies"
for p in 2379 2380 6443 8200 8201 9080 10248 10250 10257 10259; do
  o=$(ss -Hltnp "sport = :$p" 2>/dev/null)
  [ -z "$o" ] || leftover "port $p: $o"
done
[ ! -e "$AS_STATE" ] || leftover "state folder $AS_STATE"
if ((bad)); then exit 1; fi
echo "clean: no process, mount, netns, bridge, iptables rule, port or state of the local cluster remains"
