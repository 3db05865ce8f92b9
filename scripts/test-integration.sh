#!/usr/bin/env bash
# Integration tests against real components, started by the Go test harness itself (test/harness):
# etcd + kube-apiserver through controller-runtime's envtest, and a Vault dev server. This script only makes
# sure the binaries exist (building them into the cache if needed) and tells the harness where they are.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$AS_ROOT"
check_kube_version
"$AS_ROOT/scripts/build-tools.sh" apt kubernetes vault helm helm4 terraform-provider-kubernetes >&2

# envtest_assets VERSION: the folder envtest wants for one Kubernetes release (kube-apiserver, etcd,
# kubectl; the harness also starts the release's kube-controller-manager), built into the cache if needed.
envtest_assets() {
  local assets=$AS_CACHE/envtest-$1
  KUBE_VERSION=$1 "$AS_ROOT/scripts/build-tools.sh" kubernetes >&2
  mkdir -p "$assets"
  local c
  for c in kube-apiserver kubectl kube-controller-manager; do ln -sfn "$(KUBE_VERSION=$1 bin_kube "$c")" "$assets/$c"; done
  ln -sfn "$(command -v etcd || echo /usr/bin/etcd)" "$assets/etcd"
  echo "$assets"
}
AGENT_SANDBOX_VAULT_BIN=$(bin_vault)
AGENT_SANDBOX_HELM_BIN=$(bin_helm)
AGENT_SANDBOX_HELM4_BIN=$(bin_helm4)
AGENT_SANDBOX_TF_PROVIDER_MIRROR=$(dir_tfprovider)
export AGENT_SANDBOX_VAULT_BIN AGENT_SANDBOX_HELM_BIN AGENT_SANDBOX_HELM4_BIN AGENT_SANDBOX_TF_PROVIDER_MIRROR
export GOTOOLCHAIN=${GOTOOLCHAIN:-local} GOFLAGS=${GOFLAGS:--buildvcs=false}
if [ $# -eq 0 ]; then
  # The harmful-plan corpus planned by real Terraform with the provider (offline): each case refused by the
  # shipped plan rules and flagged on the approval screen. The unit phase skips these without the mirror.
  go test -count=1 -run 'WithTerraform|LocalPlanner' ./test/corpus/
fi
# The suite against the default release, then (INTEGRATION_ALL_VERSIONS=0 skips them) every other supported
# one: the API defaults the webhook expects and the fields a newer server adds are checked against each.
versions=("$KUBE_VERSION")
if [ "${INTEGRATION_ALL_VERSIONS:-1}" != 0 ]; then
  for v in "${KUBE_VERSIONS[@]}"; do [ "$v" = "$KUBE_VERSION" ] || versions+=("$v"); done
fi
for v in "${versions[@]}"; do
  KUBEBUILDER_ASSETS=$(envtest_assets "$v")
  export KUBEBUILDER_ASSETS
  log "integration tests against kube-apiserver $v ($KUBEBUILDER_ASSETS)"
  start=$SECONDS
  go test -tags integration -count=1 -timeout 20m "${@:-./test/integration/...}"
  log "integration tests against kube-apiserver $v passed in $((SECONDS - start)) s"
done
if [ $# -eq 0 ]; then
  # The chart's tests again with Helm 4 as the helm under test (render, golden, lint, package, install on an
  # API server, upgrade), against the default release only: 20-35 s more. The runs above used Helm 3, and
  # TestHelmHandOverOnAPIServer passed a release between both.
  KUBEBUILDER_ASSETS=$(envtest_assets "$KUBE_VERSION")
  export KUBEBUILDER_ASSETS
  log "the chart's integration tests with Helm 4 ($HELM4_VERSION) against kube-apiserver $KUBE_VERSION"
  AGENT_SANDBOX_HELM_BIN=$AGENT_SANDBOX_HELM4_BIN go test -tags integration -count=1 -timeout 5m \
    -run '^(TestChart|TestHelmInstallOnAPIServer$)' ./test/integration/
fi
