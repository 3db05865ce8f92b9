#!/usr/bin/env bash
# make fuzz: runs every Go fuzz target of the module for a bounded time each (default 10s):
#   scripts/fuzz.sh 30s
set -euo pipefail
cd "$(dirname "$0")/.."
TIME=${1:-10s}
export GOFLAGS=${GOFLAGS:--buildvcs=false}
found=0
for pkg in $(go list ./...); do
  for target in $(go test -list '^Fuzz' "$pkg" 2>/dev/null | grep '^Fuzz' || true); do
    found=$((found + 1))
    echo "== $pkg $target ($TIME)"
    # -fuzzminimizetime 0: minimising a large seed looks like a hang on a loaded 2-core machine.
    go test -run '^$' -fuzz "^${target}\$" -fuzztime "$TIME" -fuzzminimizetime 0 "$pkg" | tail -n 2
  done
done
echo "ran $found fuzz targets"
