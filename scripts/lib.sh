# shellcheck shell=bash
# Shared helpers for the agent-sandbox scripts. Source it; it defines no behaviour on its own.
#
# Layout:
#   $AS_CACHE/tools/<component>-<version>-<gomod hash>/   built binaries, reused across clones (never in the repo)
#   $AS_STATE/                                           the running local cluster: pki, configs, pids, logs, data
AS_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
AS_CACHE=${AGENT_SANDBOX_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agent-sandbox}
# shellcheck disable=SC2034 # used by the scripts that source this file
AS_STATE=${AGENT_SANDBOX_STATE:-/var/lib/agent-sandbox-local}
AS_TOOLS_SRC=$AS_ROOT/scripts/tools

# Versions of everything the local cluster runs. The Go-built ones are pinned by the wrapper modules in
# scripts/tools/*/go.mod; these names only label the cache.
# The Kubernetes releases the project builds and tests, each with its wrapper module in
# scripts/tools/kubernetes/<version>: the first is the default (make up, the live phase of make test);
# make test-integration runs the integration suite against every one. KUBE_VERSION=… picks another of them.
KUBE_VERSIONS=(v1.37.2 v1.35.4)
KUBE_VERSION=${KUBE_VERSION:-${KUBE_VERSIONS[0]}}
CONTAINERD_VERSION=v2.1.5
GVISOR_VERSION=v0.0.0-20260905035102-160fafc42237
NETPOL_VERSION=v0.8.0
VAULT_VERSION=v1.21.0
HELM_VERSION=v3.22.0
# Helm 4, which the chart is also tested with (make deploy HELM=4; the chart's integration tests).
HELM4_VERSION=v4.3.1
TFPROVIDER_K8S_VERSION=1.13.4

# The local cluster's profiles (make up PROFILE=...; the environment variable AGENT_SANDBOX_PROFILE):
#   default  one node that runs everything; the policy is policy/policy.yaml.
#   gke      the same node shaped as a GKE gVisor node pool (GKE Sandbox, the nodes GKE's Agent Sandbox runs
#            on): labelled $GKE_NODE_LABEL and tainted $GKE_NODE_TAINT, as GKE does, and the gvisor
#            RuntimeClass places Pods there, as GKE's does. The policy is policy/policy.yaml with that placement
#            (agent-sandbox policy place, written to $AS_STATE/policy-gke.yaml), so every sandbox Pod
#            carries the node selector and the toleration and admission refuses one without them. There is
#            one node only, so what GKE would run on another node pool tolerates the taint instead: the webhook
#            replicas and the chart's helm test Pod through chart values (set by deploy), every other Pod
#            outside the sandbox namespace (demo-app's, make verify's and preflight's probes) through a
#            MutatingAdmissionPolicy (cluster/local/gke-system-tolerations.yaml; Kubernetes 1.36 or later).
#            Sandbox Pods get nothing: they tolerate the taint because the policy renders the toleration.
# make up records the profile in $AS_STATE/profile; deploy, verify and e2e read it there (make down removes it).
AS_PROFILES=(default gke)
GKE_NODE_LABEL=sandbox.gke.io/runtime=gvisor
GKE_NODE_TAINT=sandbox.gke.io/runtime=gvisor:NoSchedule

log()  { printf '%s %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die()  { printf 'error: %s\n' "$*" >&2; exit 1; }
need_root() { [ "$(id -u)" = 0 ] || die "$1 must run as root (it starts a kubelet, containerd and changes iptables); try: sudo make ${2:-up}"; }

# has_cap N: true when the current process has capability number N in its effective set.
has_cap() { local eff; eff=$(awk '/^CapEff:/{print $2}' /proc/self/status); (( (16#$eff >> $1) & 1 )); }
# CAP_SYS_RESOURCE is 24. Without it nobody may lower an oom_score_adj, which containerd and gVisor's shim do.
has_cap_sys_resource() { has_cap 24; }

# tool_src COMPONENT VERSION: the wrapper module a component is built from (Kubernetes: one per release).
tool_src() {
  if [ "$1" = kubernetes ]; then echo "$AS_TOOLS_SRC/kubernetes/$2"; else echo "$AS_TOOLS_SRC/$1"; fi
}
# check_kube_version: KUBE_VERSION must be one the project has a wrapper module for.
check_kube_version() {
  [ -f "$(tool_src kubernetes "$KUBE_VERSION")/go.mod" ] ||
    die "KUBE_VERSION=$KUBE_VERSION is not supported; supported: ${KUBE_VERSIONS[*]} (scripts/tools/kubernetes/regen.sh adds a release)"
}
# tool_dir COMPONENT VERSION: the cache folder for one wrapper module's binaries. The key includes a hash of the
# wrapper's go.mod and go.sum so that a dependency change never reuses a stale binary.
tool_dir() {
  local comp=$1 ver=$2 variant=${3:-} h src; src=$(tool_src "$comp" "$ver")
  h=$(cat "$src/go.mod" "$src/go.sum" 2>/dev/null | sha256sum | cut -c1-8)
  printf '%s/tools/%s-%s%s-%s\n' "$AS_CACHE" "$comp" "$ver" "${variant:+-$variant}" "$h"
}
gvisor_variant() { has_cap_sys_resource || echo oomfix; }

# Paths of every binary, resolved against the cache.
bin_kube()       { echo "$(tool_dir kubernetes "$KUBE_VERSION")/$1"; }
bin_containerd() { echo "$(tool_dir containerd "$CONTAINERD_VERSION")/$1"; }
bin_gvisor()     { echo "$(tool_dir gvisor "$GVISOR_VERSION" "$(gvisor_variant)")/$1"; }
bin_netpol()     { echo "$(tool_dir netpol "$NETPOL_VERSION")/kube-network-policies"; }
bin_vault()      { echo "$(tool_dir vault "$VAULT_VERSION")/vault"; }
bin_helm()       { echo "$(tool_dir helm "$HELM_VERSION")/helm"; }
bin_helm4()      { echo "$(tool_dir helm4 "$HELM4_VERSION")/helm"; }
dir_tfprovider() { tool_dir terraform-provider-kubernetes "$TFPROVIDER_K8S_VERSION"; }

# helm_major BIN: the major version BIN reports (3, 4, ...), or nothing when it does not run as a helm.
helm_major() { "$1" version --template '{{.Version}}' 2>/dev/null | sed -n 's/^v\([0-9][0-9]*\)\..*/\1/p'; }

# helm_bin: the helm that make deploy and make e2e run, chosen by $HELM (make deploy HELM=...):
#   unset, 3 or v3          the pinned Helm 3 ($HELM_VERSION), the default
#   4 or v4                 the pinned Helm 4 ($HELM4_VERSION)
#   a path or command name  that binary; it must be Helm 3 or Helm 4
# A pinned one is built into the cache first when it is missing (scripts/build-tools.sh helm|helm4).
helm_bin() {
  local want=${HELM:-3} bin comp major
  case $want in
    3|v3) comp=helm; bin=$(bin_helm) ;;
    4|v4) comp=helm4; bin=$(bin_helm4) ;;
    [0-9]*|v[0-9]*) die "HELM=$want: the pinned helms are 3 ($HELM_VERSION) and 4 ($HELM4_VERSION); HELM takes 3, 4, or the path of a helm binary" ;;
    *)
      if [[ $want == */* ]]; then bin=$want; else bin=$(command -v "$want") || die "HELM=$want: no such command on PATH (HELM takes 3, 4, or the path of a helm binary)"; fi
      [ -f "$bin" ] && [ -x "$bin" ] || die "HELM=$want: $bin is not an executable file (HELM takes 3, 4, or the path of a helm binary)"
      ;;
  esac
  if [ -n "${comp:-}" ] && ! [ -x "$bin" ]; then "$AS_ROOT/scripts/build-tools.sh" "$comp" >&2; fi
  major=$(helm_major "$bin")
  case $major in
    3|4) ;;
    '') die "HELM=$want: $bin does not answer \`version\` as a helm binary does" ;;
    *) die "HELM=$want: $bin is Helm $major; agent-sandbox supports Helm 3 and Helm 4" ;;
  esac
  echo "$bin"
}
KUBECTL() { "$(bin_kube kubectl)" "$@"; }

# elapsed START: seconds since START (a `date +%s.%N` value), one decimal.
elapsed() { awk -v s="$1" -v e="$(date +%s.%N)" 'BEGIN{printf "%.1f", e-s}'; }

# The person a command is for: the one who ran sudo (SUDO_USER, when root through sudo), else whoever runs it.
# client_config_dir is that person's client folder, which `agent-sandbox mcp` reads by default
# (internal/clientconfig): $XDG_CONFIG_HOME/agent-sandbox for oneself, ~USER/.config/agent-sandbox for the
# sudo user (whose XDG_CONFIG_HOME root cannot know).
sudo_user() { if [ "$(id -u)" = 0 ] && [ -n "${SUDO_USER:-}" ] && [ "$SUDO_USER" != root ]; then echo "$SUDO_USER"; fi; }
home_of() { getent passwd "$1" | cut -d: -f6; }
client_config_dir() {
  local u=${1:-$(sudo_user)}
  if [ -n "$u" ] && [ "$u" != "$(id -un)" ]; then echo "$(home_of "$u")/.config/agent-sandbox"; return; fi
  case ${XDG_CONFIG_HOME:-} in /*) echo "$XDG_CONFIG_HOME/agent-sandbox" ;; *) echo "$HOME/.config/agent-sandbox" ;; esac
}

# agent_sandbox_bin: prints the path of an agent-sandbox command built from this checkout, for scripts that
# read a policy, a key set or a tool result: they ask it (agent-sandbox policy get, keys check, ...) instead
# of parsing YAML or JSON themselves. $AGENT_SANDBOX_BIN when set (a binary built already, as the script
# tests do), else $AS_CACHE/agent-sandbox-bin, built now (Go's build cache makes a rebuild quick).
agent_sandbox_bin() {
  if [ -n "${AGENT_SANDBOX_BIN:-}" ]; then
    [ -x "$AGENT_SANDBOX_BIN" ] || die "AGENT_SANDBOX_BIN=$AGENT_SANDBOX_BIN is not an executable file"
    echo "$AGENT_SANDBOX_BIN"; return
  fi
  local bin=$AS_CACHE/agent-sandbox-bin
  (cd "$AS_ROOT" && CGO_ENABLED=0 go build -trimpath -o "$bin" ./cmd/agent-sandbox) >&2 \
    || die "cannot build the agent-sandbox command (go build ./cmd/agent-sandbox); the scripts read policies and key sets with it"
  echo "$bin"
}

# cluster_profile: the profile the local cluster was brought up with (make up records it), or nothing.
cluster_profile() { cat "$AS_STATE/profile" 2>/dev/null || true; }
# as_profile: the profile asked for ($AGENT_SANDBOX_PROFILE), else the local cluster's, else default. A profile
# asked for that is not the running cluster's is an error: the cluster is shaped at make up.
as_profile() {
  local want=${AGENT_SANDBOX_PROFILE:-} have; have=$(cluster_profile)
  if [ -n "$want" ]; then
    [[ " ${AS_PROFILES[*]} " == *" $want "* ]] || die "PROFILE=$want is not a profile of the local cluster; profiles: ${AS_PROFILES[*]}"
    [ -z "$have" ] || [ "$have" = "$want" ] || die "PROFILE=$want, but the local cluster was brought up with PROFILE=$have; make down, then make up PROFILE=$want"
    echo "$want"; return
  fi
  echo "${have:-default}"
}
# profile_policy: the path of the policy the local cluster's profile runs, derived first when it is not
# policy/policy.yaml itself (again every time, so that it never lags behind policy/policy.yaml).
profile_policy() {
  local profile out
  profile=$(as_profile) || exit 1 # the reason is printed already; a command substitution does not stop on it
  case $profile in
    default) echo "$AS_ROOT/policy/policy.yaml" ;;
    gke)
      out=$AS_STATE/policy-gke.yaml
      "$(agent_sandbox_bin)" policy place --policy "$AS_ROOT/policy/policy.yaml" \
        --node-selector "$GKE_NODE_LABEL" --toleration "$GKE_NODE_TAINT" --out "$out" >&2 ||
        die "cannot derive the gke profile's policy from policy/policy.yaml"
      echo "$out"
      ;;
    *) die "profile $profile has no policy" ;;
  esac
}
