#!/usr/bin/env bash
# Regenerates this wrapper module's go.mod for another Kubernetes release:
#   KUBE_VERSION=v1.35.4 ./regen.sh
# k8s.io/kubernetes points its staging modules (k8s.io/api, k8s.io/client-go, ...) at ./staging with replace
# directives that only work inside its own repository, so a module that requires it must map every staging
# module to the published v0.MINOR.PATCH instead.
set -euo pipefail
cd "$(dirname "$0")"
KUBE_VERSION=${KUBE_VERSION:-v1.35.4}
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
