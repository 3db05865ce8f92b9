#!/usr/bin/env bash
# make chaos: faults injected on the live cluster (after make deploy) while real MCP calls run — a webhook
# replica killed, Vault and the API server restarted, the MCP server killed between plan and apply and
# during a run, the audit disk full, an approval expiring in the queue (test/e2e/chaos_test.go). Prints one
# PASS or FAIL line per scenario; exits non-zero if any failed. Root: it restarts local components.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
need_root "make chaos" chaos
cd "$AS_ROOT" || exit 1
make -s build >/dev/null || die "build failed"
log=$(mktemp); trap 'rm -f "$log"' EXIT
E2E_TAGS=e2e,chaos E2E_TIMEOUT=60m scripts/e2e.sh -run '^TestChaos$' >"$log" 2>&1
rc=$?
grep -E '^\s+(chaos_test|e2e_test)\.go:[0-9]+:' "$log" | sed 's/^ *//' | tail -n 80
echo
echo "== chaos scenarios =="
grep -E -- '^\s*--- (PASS|FAIL|SKIP): TestChaos/' "$log" | sed -E 's/^\s*--- (PASS|FAIL|SKIP): TestChaos\/(.*) \(([0-9.]+s)\)$/\1  \2  (\3)/; s/_/ /g'
if ! grep -qE -- '^\s*--- (PASS|FAIL): TestChaos/' "$log"; then tail -n 40 "$log"; fi
exit $rc
