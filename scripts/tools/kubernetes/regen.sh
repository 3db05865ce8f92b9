#!/usr/bin/env bash
# Writes the wrapper module of one Kubernetes release, ./<version>/{go.mod,go.sum,tools.go}, which
# scripts/build-tools.sh builds the cluster's binaries from (add the version to KUBE_VERSIONS in
# scripts/lib.sh to offer it):
#   KUBE_VERSION=v1.37.2 CODEGEN_VERSION=v0.37.2 ./regen.sh
# k8s.io/kubernetes points its staging modules (k8s.io/api, k8s.io/client-go, ...) at ./staging with replace
# directives that only work inside its own repository, so a module that requires it must map every staging
# module to the published v0.MINOR.PATCH instead.
set -euo pipefail
cd "$(dirname "$0")"
KUBE_VERSION=${KUBE_VERSION:?set KUBE_VERSION, e.g. v1.37.2}
mkdir -p "$KUBE_VERSION"
[ -f "$KUBE_VERSION/tools.go" ] || cp "$(ls -d v*/tools.go | head -n 1)" "$KUBE_VERSION/tools.go"
cd "$KUBE_VERSION"
STAGING_VERSION=v0${KUBE_VERSION#v1}
# k8s.io/code-generator v0.35.4 is not served by the module proxy; it is not linked into any binary we build.
CODEGEN_VERSION=${CODEGEN_VERSION:-v0.35.7}
mod=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
{
  printf 'module agent-sandbox.local/tools/kubernetes\n\ngo 1.25.0\n\nrequire k8s.io/kubernetes %s\n\nreplace (\n' "$KUBE_VERSION"
  sed -n '/^replace (/,/^)/p' "$mod" | awk '/=>/{print $1}' | while read -r m; do
    case $m in
      k8s.io/sample-cli-plugin|k8s.io/sample-controller) ;; # not required by k8s.io/kubernetes, not served
      k8s.io/code-generator) printf '\t%s => %s %s\n' "$m" "$m" "$CODEGEN_VERSION" ;;
      *) printf '\t%s => %s %s\n' "$m" "$m" "$STAGING_VERSION" ;;
    esac
  done
  printf ')\n'
} > go.mod
go mod tidy
