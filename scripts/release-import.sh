#!/usr/bin/env bash
# Imports the images of a release folder (make release; dist/ by default) into the local cluster's containerd,
# under their release names and by digest, so that the packaged chart's image references
# (REGISTRY/agent-sandbox-*:VERSION@sha256:...) resolve on the local node without a registry. scripts/deploy.sh
# runs it when CHART names a packaged chart.
#
#   sudo scripts/release-import.sh [DIST]
set -euo pipefail
. "$(dirname "$0")/lib.sh"
DIST=${1:-$AS_ROOT/dist}
need_root "importing images into the local cluster's containerd" deploy
[ -f "$DIST/release.json" ] || die "no release in $DIST (release.json is missing); run: make release"
[ -S "$AS_STATE/run/containerd.sock" ] || die "the local cluster is not up; run: make up"
ctr_cmd() { "$(bin_containerd ctr)" -a "$AS_STATE/run/containerd.sock" -n k8s.io "$@"; }

# One line per image: repository, tag, OCI archive (relative to DIST), image index digest, read from
# release.json by the release tool that wrote it.
images=$(cd "$AS_ROOT" && GOTOOLCHAIN=local GOFLAGS=-buildvcs=false go run ./scripts/release -list-images "$DIST") \
  || die "cannot read the images of $DIST/release.json"
while read -r repo tag archive digest; do
  # --base-name keeps only this repository's names. The kubelet looks an image reference that carries a
  # digest up as REPO@sha256:<index>; ctr's --digests adds that name only to images without a tag, so the
  # tagged image is given it explicitly, after checking that the tag points at that very index.
  ctr_cmd images import --base-name "$repo" "$DIST/$archive" >/dev/null
  got=$(ctr_cmd images ls | awk -v n="$repo:$tag" '$1 == n {print $3}')
  [ "$got" = "$digest" ] || die "after importing $archive, $repo:$tag is ${got:-missing}, not the release's $digest"
  ctr_cmd images tag --force "$repo:$tag" "$repo@$digest" >/dev/null
  ctr_cmd images ls -q | grep -qx "$repo@$digest" || die "after importing $archive, containerd has no image $repo@$digest"
  log "imported $repo@$digest"
done <<< "$images"
