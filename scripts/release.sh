#!/usr/bin/env bash
# Builds the release artifacts without Docker and without a registry (make release): the webhook, credential
# agent and runner images as OCI layouts and archives, their SBOMs, and the Helm chart as a .tgz and an OCI
# artifact, into dist/. Pushes them only with PUSH=1. See docs/release.md.
#
#   REGISTRY=ghcr.io/acme VERSION=v0.2.0 scripts/release.sh   names the images REGISTRY/agent-sandbox-*:VERSION
#   CHECK=1 scripts/release.sh                                 builds twice and fails unless both are identical
#   PUSH=1 REGISTRY=... scripts/release.sh                     pushes to REGISTRY (docker login first)
#   scripts/release.sh -docker-archives=false ...              extra flags go to the Go tool (go run ./scripts/release -h)
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$AS_ROOT"
# The runner image carries the same Terraform provider build as the dev image: the cached filesystem mirror.
"$AS_ROOT/scripts/build-tools.sh" terraform-provider-kubernetes >&2
args=(-out "${OUT:-dist}" -provider-mirror "$(dir_tfprovider)")
[ -n "${REGISTRY:-}" ] && args+=(-registry "$REGISTRY")
[ -n "${VERSION:-}" ] && args+=(-version "$VERSION")
[ "${CHECK:-0}" = 1 ] && args+=(-check)
[ "${PUSH:-0}" = 1 ] && args+=(-push)
exec env GOTOOLCHAIN=local GOFLAGS=-buildvcs=false go run ./scripts/release "${args[@]}" "$@"
