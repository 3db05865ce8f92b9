#!/usr/bin/env bash
# Installs the Debian packages and builds, from the Go module proxy, every binary the local cluster needs.
# Built binaries land in $AS_CACHE/tools (outside the repository), keyed by component, version and a hash of
# the wrapper module, so a second run -- or CI in a fresh clone on the same machine -- takes seconds.
#
#   scripts/build-tools.sh            everything that is missing
#   scripts/build-tools.sh vault helm only those components
#   scripts/build-tools.sh --list     what is cached and what is not
set -euo pipefail
. "$(dirname "$0")/lib.sh"

ALL=(apt kubernetes containerd gvisor netpol helm helm4 terraform-provider-kubernetes vault)
APT_PACKAGES=(etcd-server runc containernetworking-plugins iptables conntrack iproute2 busybox-static openssl curl util-linux ca-certificates shellcheck)

export CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOTOOLCHAIN=${GOTOOLCHAIN:-local}

# heartbeat LABEL PID: print a line every 60 s while PID lives, so a long cold build never sits silent.
heartbeat() {
  local label=$1 pid=$2 start=$SECONDS
  while kill -0 "$pid" 2>/dev/null; do
    sleep 5
    if (( (SECONDS - start) % 60 < 5 && SECONDS - start >= 60 )); then log "  ... still building $label ($((SECONDS - start)) s)"; fi
  done
}

# gobuild DIR OUT PKG [LDFLAGS] [TAGS]: one go build inside wrapper module DIR, timed, with progress.
gobuild() {
  local dir=$1 out=$2 pkg=$3 ldflags=${4:--s -w} tags=${5:-} start=$SECONDS rc=0
  log "building $(basename "$out") ($pkg)"
  ( cd "$dir" && exec nice -n 10 go build -trimpath ${tags:+-tags "$tags"} -ldflags "$ldflags" -o "$out" "$pkg" ) &
  local pid=$!
  heartbeat "$(basename "$out")" "$pid" &
  local hb=$!
  wait "$pid" || rc=$?
  kill "$hb" 2>/dev/null; wait "$hb" 2>/dev/null || true
  (( rc == 0 )) || die "building $pkg failed (exit $rc); the go output is above"
  log "built $(basename "$out") in $((SECONDS - start)) s ($(du -m "$out" | cut -f1) MB)"
}

# component COMP VERSION [VARIANT] -- BUILD_FN: runs BUILD_FN TMPDIR unless the cache already holds the result.
component() {
  local comp=$1 ver=$2 variant=${3:-} fn=$4 dir tmp start=$SECONDS
  dir=$(tool_dir "$comp" "$ver" "$variant")
  if [ -f "$dir/.complete" ]; then log "$comp $ver${variant:+ ($variant)}: cached in $dir"; return; fi
  tmp=$dir.partial; rm -rf "$tmp"; mkdir -p "$tmp"
  "$fn" "$tmp"
  date -u +%FT%TZ > "$tmp/.complete"
  rm -rf "$dir"; mv "$tmp" "$dir"
  log "$comp $ver${variant:+ ($variant)}: ready in $dir ($((SECONDS - start)) s)"
}

build_kubernetes() {
  local minor; minor=$(echo "$KUBE_VERSION" | cut -d. -f2)
  local ld="-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1"
  ld="$ld -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
  for c in kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl; do
    gobuild "$(tool_src kubernetes "$KUBE_VERSION")" "$1/$c" "k8s.io/kubernetes/cmd/$c" "$ld" providerless
  done
}

build_containerd() {
  local ld="-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION"
  for c in containerd containerd-shim-runc-v2 ctr; do
    gobuild "$AS_TOOLS_SRC/containerd" "$1/$c" "github.com/containerd/containerd/v2/cmd/$c" "$ld" "no_btrfs no_devmapper no_zfs no_aufs"
  done
}

build_gvisor() {
  gobuild "$AS_TOOLS_SRC/gvisor" "$1/runsc" gvisor.dev/gvisor/runsc
  if has_cap_sys_resource; then
    gobuild "$AS_TOOLS_SRC/gvisor" "$1/containerd-shim-runsc-v1" gvisor.dev/gvisor/shim
    return
  fi
  # This machine lacks CAP_SYS_RESOURCE, so gVisor's shim cannot lower its own oom_score_adj to -999 and
  # every sandbox fails to start. Build the shim from a copy of the module whose oomScoreMax is 0. This is a
  # local-machine workaround only: with the capability (any normal node) the published source is built.
  local src="$1/src" wrap="$1/wrap" modsrc
  modsrc=$(cd "$AS_TOOLS_SRC/gvisor" && go mod download -json "gvisor.dev/gvisor@$GVISOR_VERSION" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')
  cp -r "$modsrc" "$src"; chmod -R u+w "$src"
  sed -i 's/^\toomScoreMax = -999$/\toomScoreMax = 0/' "$src/pkg/shim/v1/manager.go"
  grep -q '^	oomScoreMax = 0$' "$src/pkg/shim/v1/manager.go" || die "gVisor shim patch no longer applies (pkg/shim/v1/manager.go changed)"
  mkdir -p "$wrap"
  sed '/^module /s#.*#module agent-sandbox.local/tools/gvisor-oomfix#' "$AS_TOOLS_SRC/gvisor/go.mod" > "$wrap/go.mod"
  printf '\nreplace gvisor.dev/gvisor => %s\n' "$src" >> "$wrap/go.mod"
  cp "$AS_TOOLS_SRC/gvisor/go.sum" "$AS_TOOLS_SRC/gvisor/tools.go" "$wrap/"
  gobuild "$wrap" "$1/containerd-shim-runsc-v1" gvisor.dev/gvisor/shim
  rm -rf "$src" "$wrap"
}

build_netpol() { gobuild "$AS_TOOLS_SRC/netpol" "$1/kube-network-policies" sigs.k8s.io/kube-network-policies/cmd; }

build_helm() {
  local m=helm.sh/helm/v3 minor; minor=$(echo "$KUBE_VERSION" | cut -d. -f2)
  # Without the Makefile's -X flags helm reports version "v3.19" and Kubernetes v1.20, which breaks kubeVersion checks.
  local ld="-s -w -X $m/internal/version.version=$HELM_VERSION -X $m/internal/version.gitTreeState=clean"
  ld="$ld -X $m/pkg/lint/rules.k8sVersionMajor=1 -X $m/pkg/lint/rules.k8sVersionMinor=$minor"
  ld="$ld -X $m/pkg/chartutil.k8sVersionMajor=1 -X $m/pkg/chartutil.k8sVersionMinor=$minor"
  gobuild "$AS_TOOLS_SRC/helm" "$1/helm" "$m/cmd/helm" "$ld"
}

build_helm4() {
  local m=helm.sh/helm/v4
  # Helm 4's Makefile sets the version the same way; without it `helm version` says "v4.3". Unlike Helm 3, the
  # Kubernetes version that lint and template assume comes from the client-go version in the build info
  # (pkg/chart/common/capabilities.go), which -trimpath keeps, so it needs no -X flag.
  local ld="-s -w -X $m/internal/version.version=$HELM4_VERSION -X $m/internal/version.gitTreeState=clean"
  gobuild "$AS_TOOLS_SRC/helm4" "$1/helm" "$m/cmd/helm" "$ld"
}

build_terraform-provider-kubernetes() {
  # Laid out as a Terraform filesystem mirror, so `terraform init` needs no registry.
  local d="$1/registry.terraform.io/hashicorp/kubernetes/$TFPROVIDER_K8S_VERSION/linux_amd64"
  mkdir -p "$d"
  gobuild "$AS_TOOLS_SRC/terraform-provider-kubernetes" "$d/terraform-provider-kubernetes_v$TFPROVIDER_K8S_VERSION" \
    github.com/hashicorp/terraform-provider-kubernetes
}

build_vault() { gobuild "$AS_TOOLS_SRC/vault" "$1/vault" github.com/hashicorp/vault; }

install_apt() {
  local missing=()
  for p in "${APT_PACKAGES[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p"); done
  if ((${#missing[@]} == 0)); then log "apt packages: all installed"; return; fi
  [ "$(id -u)" = 0 ] || die "apt packages missing (${missing[*]}); run as root to install them"
  log "apt-get install ${missing[*]}"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

version_of() {
  case $1 in
    kubernetes) echo "$KUBE_VERSION" ;; containerd) echo "$CONTAINERD_VERSION" ;; gvisor) echo "$GVISOR_VERSION" ;;
    netpol) echo "$NETPOL_VERSION" ;; helm) echo "$HELM_VERSION" ;; helm4) echo "$HELM4_VERSION" ;; vault) echo "$VAULT_VERSION" ;;
    terraform-provider-kubernetes) echo "$TFPROVIDER_K8S_VERSION" ;; *) die "unknown component $1 (known: ${ALL[*]})" ;;
  esac
}

main() {
  local want=("$@")
  ((${#want[@]})) || want=("${ALL[@]}")
  if [ "${want[0]}" = --list ]; then
    for c in "${ALL[@]:1}"; do
      local v d; v=$(version_of "$c"); d=$(tool_dir "$c" "$v" "$([ "$c" = gvisor ] && gvisor_variant)")
      if [ -f "$d/.complete" ]; then echo "cached   $c $v  $d"; else echo "missing  $c $v"; fi
    done
    return
  fi
  check_kube_version
  command -v go >/dev/null || die "go is not on PATH (need Go 1.26)"
  # One build at a time: two concurrent cold builds would thrash a 2-core machine and race on the cache.
  mkdir -p "$AS_CACHE"
  exec 9>"$AS_CACHE/.build-tools.lock"
  flock -n 9 || { log "another build-tools run holds $AS_CACHE/.build-tools.lock; waiting for it"; flock 9; }
  local start=$SECONDS
  for c in "${want[@]}"; do
    if [ "$c" = apt ]; then install_apt; continue; fi
    local v; v=$(version_of "$c")
    component "$c" "$v" "$([ "$c" = gvisor ] && gvisor_variant)" "build_$c"
  done
  log "tools ready in $((SECONDS - start)) s (cache: $AS_CACHE/tools)"
}
main "$@"
