#!/usr/bin/env bash
# Brings up the local single-node Kubernetes that agent-sandbox uses as its embedded default:
# etcd, kube-apiserver, controller-manager, scheduler, containerd 2 with runc and gVisor (runsc), kubelet,
# bridge CNI, kube-network-policies (the NetworkPolicy enforcer) and a Vault dev server on loopback.
#
# Idempotent: a component that is already running and healthy is left alone, so a second run changes
# nothing. A component whose PID file names a dead process (a crashed run) is started again.
# Everything lives under $AS_STATE; `scripts/down.sh` removes it. Binaries come from the build cache
# (scripts/build-tools.sh, run first if something is missing).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
need_root "scripts/up.sh" up
check_kube_version
# The cluster's shape (scripts/lib.sh: default, gke); a running cluster keeps the one it was brought up with.
PROFILE=$(as_profile)
# The gke profile's system Pods tolerate its taint through a MutatingAdmissionPolicy, GA (on by default) from 1.36.
if [ "$PROFILE" = gke ] && (( $(echo "$KUBE_VERSION" | cut -d. -f2) < 36 )); then
  die "PROFILE=gke needs Kubernetes 1.36 or later (a MutatingAdmissionPolicy tolerates its taint for system Pods); KUBE_VERSION=$KUBE_VERSION"
fi

T0=$(date +%s.%N)
POD_CIDR=10.244.0.0/24
GATEWAY=10.244.0.1
BRIDGE=as-cni0
SERVICE_CIDR=10.96.0.0/16
NODE_NAME=${AGENT_SANDBOX_NODE_NAME:-agent-sandbox-node}
PAUSE_IMAGE=localhost/pause:agent-sandbox
CTRD_SOCK=$AS_STATE/run/containerd.sock
export KUBECONFIG=$AS_STATE/admin.kubeconfig

host_ip() {
  local ip
  ip=$(ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p')
  [ -n "$ip" ] || ip=$(ip -4 -o addr show scope global | awk '{sub(/\/.*/, "", $4); print $4; exit}')
  [ -n "$ip" ] || die "cannot find this machine's IPv4 address (no default route and no global address)"
  echo "$ip"
}
HOST_IP=$(host_ip)

# ---------------------------------------------------------------- process management
pidfile() { echo "$AS_STATE/run/$1.pid"; }
alive() { local f; f=$(pidfile "$1"); [ -f "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null; }

# port_owner PORT: "pid/name" of the process listening on TCP PORT, empty when free.
port_owner() { ss -Hltnp "sport = :$1" 2>/dev/null | sed -n 's/.*pid=\([0-9]*\).*/\1/p' | head -1; }

check_ports() { # NAME PORT...: every port must be free before NAME starts
  local name=$1 p owner; shift
  for p in "$@"; do
    owner=$(port_owner "$p")
    [ -z "$owner" ] || die "$name cannot start: port $p is in use by pid $owner ($(cat /proc/"$owner"/comm 2>/dev/null)). Stop it, or run 'make down' if it is a leftover of an earlier run."
  done
}

# close_fds closes every descriptor above 2 of the current (sub)shell.
close_fds() {
  local fd
  for fd in /proc/"$BASHPID"/fd/*; do
    fd=${fd##*/}
    if ((fd > 2)); then eval "exec $fd>&-" 2>/dev/null || true; fi
  done
}

# start NAME HEALTH_FN TIMEOUT -- CMD...: start CMD in the background unless NAME already runs, then wait up
# to TIMEOUT seconds for HEALTH_FN. A process that exits while we wait is reported with its log.
start() {
  local name=$1 health=$2 timeout=$3; shift 4
  local log=$AS_STATE/logs/$name.log pf; pf=$(pidfile "$name")
  if alive "$name"; then
    if "$health"; then log "$name: running (pid $(cat "$pf"))"; return; fi
  else
    if [ -f "$pf" ]; then log "$name: stale pid file from an earlier run (pid $(cat "$pf") is gone); starting it again"; rm -f "$pf"; fi
    local s; s=$(date +%s.%N)
    # The daemon gets none of this shell's other descriptors: a lock a caller holds (flock file make up,
    # say) must not outlive the caller in a daemon that inherited it.
    (close_fds; exec setsid "$@") >>"$log" 2>&1 < /dev/null &
    echo $! > "$pf"
    STARTED[$name]=$s
  fi
  local deadline=$((SECONDS + timeout))
  until "$health"; do
    if ! alive "$name"; then
      printf 'error: %s exited during start-up. Last lines of %s:\n' "$name" "$log" >&2
      tail -n 15 "$log" >&2
      exit 1
    fi
    ((SECONDS < deadline)) || die "$name did not become healthy within ${timeout}s; see $log"
    sleep 0.2
  done
  if [ -n "${STARTED[$name]:-}" ]; then log "$name: started (pid $(cat "$pf")), healthy after $(elapsed "${STARTED[$name]}") s"; fi
}
declare -A STARTED=()

# Host paths that containerd, the kubelet and CNI use at fixed locations. The ones that did not exist before
# the first `up` are recorded, so that `down` removes exactly those and nothing that was already there.
HOST_PATHS=(/run/containerd /run/nri /run/netns /var/lib/cni /var/log/containers /var/log/pods /var/lib/kubelet)
remember_host_paths() {
  local f=$AS_STATE/host-paths p
  [ -f "$f" ] && return
  for p in "${HOST_PATHS[@]}"; do [ -e "$p" ] || echo "$p"; done > "$f"
}

# ---------------------------------------------------------------- files
render() { # TEMPLATE OUT: replace @KEY@ placeholders
  sed -e "s#@STATE@#$AS_STATE#g" -e "s#@POD_CIDR@#$POD_CIDR#g" -e "s#@GATEWAY@#$GATEWAY#g" \
      -e "s#@BRIDGE@#$BRIDGE#g" -e "s#@PAUSE_IMAGE@#$PAUSE_IMAGE#g" -e "s#@RUNSC@#$(bin_gvisor runsc)#g" \
      -e "s#@RESTRICT_OOM@#$RESTRICT_OOM#g" "$1" > "$2.tmp"
  mv "$2.tmp" "$2"
}

gen_pki() {
  local d=$AS_STATE/pki
  mkdir -p "$d"; chmod 700 "$d"
  # A host IP change (another machine, a new lease) invalidates the serving certificates.
  if [ -f "$d/apiserver.crt" ] && ! openssl x509 -in "$d/apiserver.crt" -noout -ext subjectAltName 2>/dev/null | grep -q "IP Address:$HOST_IP\b"; then
    log "pki: host IP is now $HOST_IP; re-issuing serving certificates"
    rm -f "$d/apiserver.crt" "$d/kubelet-serving.crt"
  fi
  [ -f "$d/ca.crt" ] || openssl req -x509 -newkey rsa:2048 -nodes -keyout "$d/ca.key" -out "$d/ca.crt" -days 3650 \
    -subj "/CN=agent-sandbox-local-ca" 2>/dev/null
  [ -f "$d/sa.key" ] || { openssl genrsa -out "$d/sa.key" 2048 2>/dev/null; openssl rsa -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null; }
  cert apiserver "/CN=kube-apiserver" serverAuth \
    "DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:10.96.0.1,IP:$HOST_IP,IP:$GATEWAY"
  cert admin "/O=system:masters/CN=agent-sandbox-admin" clientAuth
  cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
  cert controller-manager "/CN=system:kube-controller-manager" clientAuth
  cert scheduler "/CN=system:kube-scheduler" clientAuth
  cert kubelet-client "/O=system:nodes/CN=system:node:$NODE_NAME" clientAuth
  cert kubelet-serving "/CN=$NODE_NAME" serverAuth "DNS:$NODE_NAME,DNS:localhost,IP:127.0.0.1,IP:$HOST_IP"
  if [ ! -f "$d/tokens.csv" ]; then
    # The enforcer only reads in-cluster credentials, so it gets a static bearer token.
    (umask 077; printf '%s,kube-network-policies,kube-network-policies\n' "$(openssl rand -hex 24)" > "$d/tokens.csv")
  fi
  for k in admin controller-manager scheduler kubelet-client; do kubeconfig "$k"; done
  cp "$d/admin.kubeconfig" "$AS_STATE/admin.kubeconfig"
}

cert() { # NAME SUBJECT EKU [SAN]
  local d=$AS_STATE/pki n=$1 subj=$2 eku=$3 san=${4:-}
  [ -f "$d/$n.crt" ] && return
  openssl req -new -newkey rsa:2048 -nodes -keyout "$d/$n.key" -subj "$subj" -out "$d/$n.csr" 2>/dev/null
  { echo "basicConstraints=CA:FALSE"; echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$eku"; [ -z "$san" ] || echo "subjectAltName=$san"; } > "$d/$n.ext"
  openssl x509 -req -in "$d/$n.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial -days 825 \
    -extfile "$d/$n.ext" -out "$d/$n.crt" 2>/dev/null
  rm -f "$d/$n.csr" "$d/$n.ext"
  chmod 600 "$d/$n.key"
}

kubeconfig() { # NAME: a kubeconfig with NAME's client certificate, embedded
  local d=$AS_STATE/pki f=$AS_STATE/pki/$1.kubeconfig
  [ -f "$f" ] && return
  KUBECTL config set-cluster local --server="https://127.0.0.1:6443" --certificate-authority="$d/ca.crt" --embed-certs --kubeconfig="$f" >/dev/null
  KUBECTL config set-credentials "$1" --client-certificate="$d/$1.crt" --client-key="$d/$1.key" --embed-certs --kubeconfig="$f" >/dev/null
  KUBECTL config set-context local --cluster=local --user="$1" --kubeconfig="$f" >/dev/null
  KUBECTL config use-context local --kubeconfig="$f" >/dev/null
  chmod 600 "$f"
}

# ---------------------------------------------------------------- health checks
etcd_ok()       { curl -sf --max-time 1 http://127.0.0.1:2379/health >/dev/null 2>&1; }
apiserver_ok()  { [ "$(curl -sk --max-time 2 https://127.0.0.1:6443/readyz 2>/dev/null)" = ok ]; }
containerd_ok() { "$(bin_containerd ctr)" -a "$CTRD_SOCK" version >/dev/null 2>&1; }
kcm_ok()        { curl -sk --max-time 1 https://127.0.0.1:10257/healthz 2>/dev/null | grep -q ok; }
sched_ok()      { curl -sk --max-time 1 https://127.0.0.1:10259/healthz 2>/dev/null | grep -q ok; }
kubelet_ok()    { curl -sf --max-time 1 http://127.0.0.1:10248/healthz >/dev/null 2>&1; }
netpol_ok()     { curl -sf --max-time 1 http://127.0.0.1:9080/metrics >/dev/null 2>&1; }
vault_ok()      { VAULT_ADDR=http://127.0.0.1:8200 "$(bin_vault)" status >/dev/null 2>&1; }

# ---------------------------------------------------------------- main
main() {
  mkdir -p "$AS_STATE"/{run,logs,conf/cni,images,vault}
  chmod 700 "$AS_STATE"
  echo "$PROFILE" > "$AS_STATE/profile"
  [ "$PROFILE" = default ] || log "profile $PROFILE"
  "$AS_ROOT/scripts/build-tools.sh" apt kubernetes containerd gvisor netpol vault

  if has_cap_sys_resource; then RESTRICT_OOM=false; else
    RESTRICT_OOM=true; log "this machine lacks CAP_SYS_RESOURCE: containerd restricts oom_score_adj and the gVisor shim is the patched build"
  fi
  modprobe br_netfilter 2>/dev/null || true
  sysctl -qw net.ipv4.ip_forward=1
  sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null || log "warning: net.bridge.bridge-nf-call-iptables is unavailable; NetworkPolicy needs br_netfilter"

  remember_host_paths
  gen_pki
  render "$AS_ROOT/cluster/local/containerd.toml" "$AS_STATE/conf/containerd.toml"
  render "$AS_ROOT/cluster/local/runsc.toml" "$AS_STATE/conf/runsc.toml"
  render "$AS_ROOT/cluster/local/kubelet.yaml" "$AS_STATE/conf/kubelet.yaml"
  render "$AS_ROOT/cluster/local/cni.conflist" "$AS_STATE/conf/cni/10-agent-sandbox.conflist"
  render "$AS_ROOT/cluster/local/vault.hcl" "$AS_STATE/conf/vault.hcl"

  local P=$AS_STATE/pki
  alive etcd || check_ports etcd 2379 2380
  start etcd etcd_ok 30 -- /usr/bin/etcd --name agent-sandbox --data-dir "$AS_STATE/etcd" \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster agent-sandbox=http://127.0.0.1:2380 --quota-backend-bytes 2147483648 \
    --experimental-watch-progress-notify-interval=1s

  alive kube-apiserver || check_ports kube-apiserver 6443
  # The gke profile tolerates its taint on every Pod outside the sandbox namespace with a
  # MutatingAdmissionPolicy (apply_profile).
  ADMISSION_PLUGINS=NodeRestriction,PodSecurity,ValidatingAdmissionPolicy,MutatingAdmissionWebhook,ValidatingAdmissionWebhook
  [ "$PROFILE" = gke ] && ADMISSION_PLUGINS+=,MutatingAdmissionPolicy
  # A bounded stop: on SIGTERM the API server answers new requests with 429 + Retry-After (clients retry)
  # until its in-flight short requests are done, gives watches 5 s to drain, then closes the rest (log
  # follows, which it would otherwise wait for up to its 60 s request timeout) after 2 s. make chaos saw
  # it exit 1-13 s after SIGTERM; its stop escalates to SIGKILL after 30 s.
  start kube-apiserver apiserver_ok 90 -- "$(bin_kube kube-apiserver)" \
    --shutdown-delay-duration=0s --shutdown-send-retry-after=true --shutdown-watch-termination-grace-period=5s \
    --etcd-servers=http://127.0.0.1:2379 --advertise-address="$HOST_IP" --bind-address=0.0.0.0 --secure-port=6443 \
    --service-cluster-ip-range="$SERVICE_CIDR" \
    --tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" \
    --client-ca-file="$P/ca.crt" --token-auth-file="$P/tokens.csv" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$P/sa.pub" --service-account-signing-key-file="$P/sa.key" \
    --api-audiences=https://kubernetes.default.svc.cluster.local \
    --authorization-mode=Node,RBAC \
    --enable-admission-plugins="$ADMISSION_PLUGINS" \
    --kubelet-client-certificate="$P/apiserver-kubelet-client.crt" --kubelet-client-key="$P/apiserver-kubelet-client.key" \
    --allow-privileged=true --profiling=false \
    --enable-aggregator-routing=true --kubelet-preferred-address-types=InternalIP,Hostname

  alive containerd || [ ! -S "$CTRD_SOCK" ] || rm -f "$CTRD_SOCK"
  start containerd containerd_ok 30 -- env PATH="$(dirname "$(bin_containerd containerd)"):$(dirname "$(bin_gvisor runsc)"):$PATH" \
    "$(bin_containerd containerd)" --config "$AS_STATE/conf/containerd.toml"
  "$AS_ROOT/scripts/images.sh" cluster

  # The cloud controllers a providerless build still lists before 1.37 are switched off; 1.37 removed them,
  # and names an unknown controller a start-up error.
  local controllers='*,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller'
  if (( $(echo "$KUBE_VERSION" | cut -d. -f2) >= 37 )); then controllers='*'; fi
  alive kube-controller-manager || check_ports kube-controller-manager 10257
  start kube-controller-manager kcm_ok 60 -- "$(bin_kube kube-controller-manager)" --kubeconfig="$P/controller-manager.kubeconfig" \
    --authentication-kubeconfig="$P/controller-manager.kubeconfig" --authorization-kubeconfig="$P/controller-manager.kubeconfig" \
    --bind-address=127.0.0.1 --leader-elect=false --use-service-account-credentials=true \
    --service-account-private-key-file="$P/sa.key" --root-ca-file="$P/ca.crt" \
    --cluster-signing-cert-file="$P/ca.crt" --cluster-signing-key-file="$P/ca.key" --service-cluster-ip-range="$SERVICE_CIDR" \
    --controllers="$controllers" --profiling=false

  alive kube-scheduler || check_ports kube-scheduler 10259
  start kube-scheduler sched_ok 60 -- "$(bin_kube kube-scheduler)" --kubeconfig="$P/scheduler.kubeconfig" \
    --authentication-kubeconfig="$P/scheduler.kubeconfig" --authorization-kubeconfig="$P/scheduler.kubeconfig" \
    --bind-address=127.0.0.1 --leader-elect=false --profiling=false

  alive kubelet || check_ports kubelet 10250 10248
  start kubelet kubelet_ok 60 -- "$(bin_kube kubelet)" --config="$AS_STATE/conf/kubelet.yaml" \
    --kubeconfig="$P/kubelet-client.kubeconfig" --root-dir="$AS_STATE/kubelet" \
    --hostname-override="$NODE_NAME" --node-ip="$HOST_IP" -v=1
  wait_node_ready

  KUBECTL apply -f "$AS_ROOT/cluster/manifests/" >/dev/null
  apply_profile
  route_kubernetes_service
  if [ "${AS_NETPOL:-on}" = off ]; then stop_netpol; else start_netpol; fi
  start_vault

  log "cluster up in $(elapsed "$T0") s"
  cat <<EOF

  The local cluster is running (node $NODE_NAME, $HOST_IP; profile $PROFILE).
    export KUBECONFIG=$AS_STATE/admin.kubeconfig
    kubectl get nodes          # kubectl $KUBE_VERSION: $(bin_kube kubectl)
    export VAULT_ADDR=http://127.0.0.1:8200 VAULT_TOKEN=\$(cat $AS_STATE/vault/root-token)
  Logs: $AS_STATE/logs    Status: make status    Stop and remove: make down
EOF
}

wait_node_ready() {
  local s deadline; s=$(date +%s.%N); deadline=$((SECONDS + 90))
  until [ "$(KUBECTL get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]; do
    alive kubelet || { tail -n 15 "$AS_STATE/logs/kubelet.log" >&2; die "kubelet exited; see $AS_STATE/logs/kubelet.log"; }
    ((SECONDS < deadline)) || die "node $NODE_NAME is not Ready after 90 s; see $AS_STATE/logs/kubelet.log"
    sleep 0.5
  done
  [ -z "${STARTED[kubelet]:-}" ] || log "node $NODE_NAME Ready after $(elapsed "$s") s"
}

# apply_profile shapes the node for the gke profile as GKE shapes a gVisor node pool: the label and the
# NoSchedule taint, and the gvisor RuntimeClass's scheduling (GKE's adds the same node selector and
# toleration to every Pod that names it); the node selector and tolerations are read from the profile's
# policy, so the node, the RuntimeClass and every sandbox Pod agree. What GKE would run on another node pool
# (every Pod outside the sandbox namespace) tolerates the taint through a MutatingAdmissionPolicy
# (cluster/local/gke-system-tolerations.yaml), since this cluster has one node. The default profile changes
# nothing.
apply_profile() {
  [ "$PROFILE" = gke ] || return 0
  local policy sel tol ns key rest
  policy=$(profile_policy)
  sel=$("$(agent_sandbox_bin)" policy get spec.sandbox.nodeSelector --policy "$policy") || die "the gke policy has no node selector"
  tol=$("$(agent_sandbox_bin)" policy get spec.sandbox.tolerations --policy "$policy") || die "the gke policy has no tolerations"
  ns=$("$(agent_sandbox_bin)" policy get spec.sandbox.namespace --policy "$policy")
  KUBECTL label node "$NODE_NAME" --overwrite "$GKE_NODE_LABEL" >/dev/null
  KUBECTL taint node "$NODE_NAME" --overwrite "$GKE_NODE_TAINT" >/dev/null
  KUBECTL patch runtimeclass gvisor --type merge -p "{\"scheduling\":{\"nodeSelector\":$sel,\"tolerations\":$tol}}" >/dev/null
  key=${GKE_NODE_TAINT%%=*} rest=${GKE_NODE_TAINT#*=}
  sed -e "s#@TAINT_KEY@#$key#g" -e "s#@TAINT_VALUE@#${rest%%:*}#g" -e "s#@TAINT_EFFECT@#${rest##*:}#g" -e "s#@SANDBOX_NS@#$ns#g" \
    "$AS_ROOT/cluster/local/gke-system-tolerations.yaml" > "$AS_STATE/conf/gke-system-tolerations.yaml"
  KUBECTL apply -f "$AS_STATE/conf/gke-system-tolerations.yaml" >/dev/null
  log "profile gke: node $NODE_NAME labelled $GKE_NODE_LABEL and tainted $GKE_NODE_TAINT; RuntimeClass gvisor places Pods there; Pods outside $ns tolerate the taint"
}

# kube-network-policies enforces NetworkPolicy with nfqueue verdicts in user space. It reads only in-cluster
# credentials, so it runs in a private mount namespace whose /run holds a service-account-shaped token and
# CA; containerd's NRI socket is bind-mounted in so pod IPs are known before a pod's first packet.
start_netpol() {
  local token; token=$(cut -d, -f1 "$AS_STATE/pki/tokens.csv")
  local nri=/run/nri
  [ -S $nri/nri.sock ] || die "containerd's NRI socket $nri/nri.sock is missing; the enforcer needs it to police a pod's first packets"
  mkdir -p "$AS_STATE/run/netpol"
  (umask 077; printf '%s' "$token" > "$AS_STATE/run/netpol/token")
  cp "$AS_STATE/pki/ca.crt" "$AS_STATE/run/netpol/ca.crt"
  alive kube-network-policies || check_ports kube-network-policies 9080
  start kube-network-policies netpol_ok 30 -- env KUBERNETES_SERVICE_HOST=127.0.0.1 KUBERNETES_SERVICE_PORT=6443 \
    unshare -m --propagation private sh -c "
      mkdir -p '$AS_STATE/run/netpol/nri' && mount --bind $nri '$AS_STATE/run/netpol/nri' &&
      mount -t tmpfs agent-sandbox-netpol /run && mkdir -p /run/secrets/kubernetes.io/serviceaccount /run/nri &&
      mount --move '$AS_STATE/run/netpol/nri' /run/nri &&
      cp '$AS_STATE/run/netpol/token' '$AS_STATE/run/netpol/ca.crt' /run/secrets/kubernetes.io/serviceaccount/ &&
      exec '$(bin_netpol)' --hostname-override='$NODE_NAME' --netfilter-bug-1766-fix=false --metrics-bind-address=127.0.0.1:9080 -v=0"
  # This kernel may lack the nftables "queue" expression that the enforcer's own rules use; iptables'
  # NFQUEUE target (through nft_compat) works everywhere, so new pod connections are diverted with it.
  # POSTROUTING covers pod-to-pod and pod-to-outside; INPUT covers pod-to-node (the API server, Vault).
  ipt_ensure mangle POSTROUTING -s "$POD_CIDR" -m conntrack --ctstate NEW -m comment --comment agent-sandbox -j NFQUEUE --queue-num 100
  ipt_ensure mangle POSTROUTING -d "$POD_CIDR" -m conntrack --ctstate NEW -m comment --comment agent-sandbox -j NFQUEUE --queue-num 100
  ipt_ensure mangle INPUT -s "$POD_CIDR" -m conntrack --ctstate NEW -m comment --comment agent-sandbox -j NFQUEUE --queue-num 100
}

# The local cluster runs no kube-proxy. Pods still find the API server the standard way (in-cluster config:
# the "kubernetes" Service's ClusterIP from $KUBERNETES_SERVICE_HOST), so that one Service VIP is routed to the
# API server with a DNAT rule. (The API server reaches webhook Services through their endpoints:
# --enable-aggregator-routing.)
route_kubernetes_service() {
  ipt_ensure nat PREROUTING -s "$POD_CIDR" -d 10.96.0.1/32 -p tcp --dport 443 -m comment --comment agent-sandbox -j DNAT --to-destination "$HOST_IP:6443"
  ipt_ensure nat OUTPUT -d 10.96.0.1/32 -p tcp --dport 443 -m comment --comment agent-sandbox -j DNAT --to-destination "$HOST_IP:6443"
}

# AS_NETPOL=off brings the node up without NetworkPolicy enforcement, as a cluster whose network plugin
# ignores NetworkPolicies would be: NetworkPolicy objects are accepted and nothing drops a packet. It is
# for proving that `make preflight` notices; `make up` without it turns enforcement back on.
stop_netpol() {
  local f p; f=$(pidfile kube-network-policies)
  if [ -f "$f" ] && p=$(cat "$f") && kill -0 "$p" 2>/dev/null; then
    kill -TERM -- "-$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
    kill -KILL -- "-$p" 2>/dev/null || true
  fi
  rm -f "$f"
  local rule
  for rule in "POSTROUTING -s $POD_CIDR" "POSTROUTING -d $POD_CIDR" "INPUT -s $POD_CIDR"; do
    # shellcheck disable=SC2086
    while iptables -t mangle -D $rule -m conntrack --ctstate NEW -m comment --comment agent-sandbox -j NFQUEUE --queue-num 100 2>/dev/null; do :; done
  done
  if nft list table inet kube-network-policies >/dev/null 2>&1; then nft delete table inet kube-network-policies; fi
  log "kube-network-policies: off (AS_NETPOL=off): NetworkPolicies are NOT enforced on this node"
}

ipt_ensure() { local t=$1 c=$2; shift 2; iptables -t "$t" -C "$c" "$@" 2>/dev/null || iptables -t "$t" -I "$c" "$@"; }

# A Linux bridge whose MAC address was never set takes the lowest MAC of its ports, so it changes whenever
# a Pod's veth comes or goes; running Pods still send to the gateway's old MAC and their packets are lost
# (seen as a sandbox's SYNs to the API server never answered). Setting the address, to its current value,
# pins it.
pin_bridge_mac() {
  [ "$(cat "/sys/class/net/$BRIDGE/addr_assign_type" 2>/dev/null)" = 3 ] && return 0
  ip link set "$BRIDGE" address "$(cat "/sys/class/net/$BRIDGE/address")"
}

# A Vault dev server: in memory, unsealed, root token generated here and kept in a 0600 file (never on a
# command line). It listens on loopback for the host and on the pod bridge's gateway for sandbox Pods.
start_vault() {
  local tf=$AS_STATE/vault/root-token
  if ! alive vault; then
    ip link show "$BRIDGE" >/dev/null 2>&1 || ip link add "$BRIDGE" type bridge
    ip -4 addr show dev "$BRIDGE" | grep -q "inet $GATEWAY/" || ip addr add "$GATEWAY/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    check_ports vault 8200 8201
    (umask 077; openssl rand -hex 24 > "$tf")
  fi
  pin_bridge_mac
  # Through the environment, not argv: a command line is visible to every user in ps.
  VAULT_DEV_ROOT_TOKEN_ID=$(cat "$tf"); export VAULT_DEV_ROOT_TOKEN_ID
  start vault vault_ok 60 -- env HOME="$AS_STATE/vault" \
    "$(bin_vault)" server -dev -dev-listen-address=127.0.0.1:8200 -dev-no-store-token -config="$AS_STATE/conf/vault.hcl"
  unset VAULT_DEV_ROOT_TOKEN_ID
}

main "$@"
