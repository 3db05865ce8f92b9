#!/usr/bin/env bash
# Builds the local cluster's images without a container engine or registry and imports them into
# containerd's k8s.io namespace:
#   cluster        localhost/pause:agent-sandbox (pod sandbox) and localhost/busybox:agent-sandbox (probes)
#   agent-sandbox  localhost/agent-sandbox:dev (the webhook, credential agent and tool runner)
set -euo pipefail
. "$(dirname "$0")/lib.sh"

OUT=$AS_STATE/images
ctr_cmd() { "$(bin_containerd ctr)" -a "$AS_STATE/run/containerd.sock" -n k8s.io "$@"; }
mkdir -p "$OUT"

imagebuild() {
  local b=$AS_CACHE/imagebuild
  (cd "$AS_ROOT" && CGO_ENABLED=0 go build -trimpath -o "$b" ./scripts/imagebuild)
  "$b" "$@"
}

# import NAME TARBALL: import unless containerd already has exactly this image.
import() {
  local name=$1 tar=$2 sum marker
  sum=$(sha256sum "$tar" | cut -d' ' -f1)
  marker=$OUT/.imported-$(echo "$name" | tr '/:' '__')
  if [ "$(cat "$marker" 2>/dev/null)" = "$sum" ] && ctr_cmd images ls -q | grep -qx "$name"; then return; fi
  ctr_cmd images import "$tar" >/dev/null
  echo "$sum" > "$marker"
  log "imported $name"
}

cluster_images() {
  if [ ! -f "$OUT/pause.tar" ]; then
    (cd "$AS_ROOT" && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$OUT/pause" ./scripts/pause)
    imagebuild -name localhost/pause:agent-sandbox -out "$OUT/pause.tar" -file "/pause=$OUT/pause:0755" \
      -entrypoint /pause -user 65535:65535
  fi
  if [ ! -f "$OUT/busybox.tar" ]; then
    imagebuild -name localhost/busybox:agent-sandbox -out "$OUT/busybox.tar" -busybox /bin/busybox \
      -passwd nonroot:65532:65532 -entrypoint /bin/sh
  fi
  import localhost/pause:agent-sandbox "$OUT/pause.tar"
  import localhost/busybox:agent-sandbox "$OUT/busybox.tar"
}

case ${1:-} in
  cluster) cluster_images ;;
  agent-sandbox) "$AS_ROOT/scripts/image-agent-sandbox.sh" ;;
  *) die "usage: scripts/images.sh cluster|agent-sandbox" ;;
esac
