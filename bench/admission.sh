#!/usr/bin/env bash
# make bench-admission: Job creates (server-side dry run) through a real kube-apiserver at concurrency
# 1/16/64, without admission, with the agent-sandbox webhook and with the same rules as a native
# ValidatingAdmissionPolicy; then the webhook's handler alone (Go benchmarks). Prints figures only.
set -euo pipefail
. "$(dirname "$0")/../scripts/lib.sh"
cd "$AS_ROOT"
"$AS_ROOT/scripts/build-tools.sh" apt kubernetes >&2
assets=$AS_CACHE/envtest-$KUBE_VERSION
mkdir -p "$assets"
ln -sfn "$(bin_kube kube-apiserver)" "$assets/kube-apiserver"
ln -sfn "$(command -v etcd || echo /usr/bin/etcd)" "$assets/etcd"
ln -sfn "$(bin_kube kubectl)" "$assets/kubectl"
export KUBEBUILDER_ASSETS=$assets
go run ./bench/admission "$@"
echo
echo "The webhook's decision alone (no HTTP, no API server), one core:"
GOMAXPROCS=1 go test -run '^$' -bench 'BenchmarkCheckJob|BenchmarkHandler' -benchmem ./webhook/ | grep -E '^Benchmark|ok'
