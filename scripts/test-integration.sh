#!/usr/bin/env bash
# Integration tests against real components, started by the Go test harness itself (test/harness):
# etcd + kube-apiserver through controller-runtime's envtest, and a Vault dev server. This script only makes
# sure the binaries exist (building them into the cache if needed) and tells the harness where they are.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$AS_ROOT"
"$AS_ROOT/scripts/build-tools.sh" apt kubernetes vault helm terraform-provider-kubernetes >&2

# envtest wants one folder holding kube-apiserver, etcd and kubectl.
assets=$AS_CACHE/envtest-$KUBE_VERSION
mkdir -p "$assets"
ln -sfn "$(bin_kube kube-apiserver)" "$assets/kube-apiserver"
ln -sfn "$(bin_kube kubectl)" "$assets/kubectl"
ln -sfn "$(bin_kube kube-controller-manager)" "$assets/kube-controller-manager"
ln -sfn "$(command -v etcd || echo /usr/bin/etcd)" "$assets/etcd"
export KUBEBUILDER_ASSETS=$assets
AGENT_SANDBOX_VAULT_BIN=$(bin_vault)
AGENT_SANDBOX_HELM_BIN=$(bin_helm)
AGENT_SANDBOX_TF_PROVIDER_MIRROR=$(dir_tfprovider)
export AGENT_SANDBOX_VAULT_BIN AGENT_SANDBOX_HELM_BIN AGENT_SANDBOX_TF_PROVIDER_MIRROR
export GOTOOLCHAIN=${GOTOOLCHAIN:-local} GOFLAGS=${GOFLAGS:--buildvcs=false}
if [ $# -eq 0 ]; then
  # The harmful-plan corpus planned by real Terraform with the provider (offline): each case refused by the
  # shipped plan rules and flagged on the approval screen. The unit phase skips these without the mirror.
  go test -count=1 -run 'WithTerraform|LocalPlanner' ./test/corpus/
fi
exec go test -tags integration -count=1 -timeout 20m "${@:-./test/integration/...}"
