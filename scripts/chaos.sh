#!/usr/bin/env bash
# make chaos: faults injected on the live cluster (after make deploy) while real MCP calls run — a webhook
# replica killed, Vault and the API server restarted, the MCP server killed between plan and apply and
# during a run, the audit disk full, an approval expiring in the queue, every webhook replica gone during an
# approved apply (test/e2e/chaos_test.go). Prints one PASS or FAIL line per scenario; exits non-zero if any
# failed. Root: it restarts local components.
#
# Each scenario starts on a healthy cluster (it repairs it first, or stops with one line) and leaves one
# behind whatever happens to it, so a failure never cascades into the next scenario. Knobs:
#   CHAOS_RUN=REGEXP             only the scenarios whose name matches (spaces are underscores)
#   E2E_CHAOS_APISERVER_DOWN=90s how long the long API server scenario keeps it down
#   CHAOS_BREAK_RESTART=1        a forced failure: the API server scenarios leave it down
set -uo pipefail
. "$(dirname "$0")/lib.sh"
need_root "make chaos" chaos
cd "$AS_ROOT" || exit 1
T0=$(date +%s.%N)
make -s build >/dev/null || die "build failed"
log=$(mktemp); trap 'rm -f "$log"' EXIT
run='^TestChaos$'
[ -z "${CHAOS_RUN:-}" ] || run="^TestChaos\$/(${CHAOS_RUN})"
E2E_TAGS=e2e,chaos E2E_TIMEOUT=60m scripts/e2e.sh -run "$run" >"$log" 2>&1
rc=$?
grep -E '^\s+(chaos_test|e2e_test)\.go:[0-9]+:' "$log" | sed 's/^ *//' | tail -n 80
echo
echo "== chaos scenarios =="
grep -E -- '^\s*--- (PASS|FAIL|SKIP): TestChaos/' "$log" | sed -E 's/^\s*--- (PASS|FAIL|SKIP): TestChaos\/(.*) \(([0-9.]+s)\)$/\1  \2  (\3)/; s/_/ /g'
if ! grep -qE -- '^\s*--- (PASS|FAIL): TestChaos/' "$log"; then tail -n 40 "$log"; fi
echo "make chaos: $(elapsed "$T0") s in all, exit $rc"
exit $rc
