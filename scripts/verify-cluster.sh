#!/usr/bin/env bash
# Proves on the live cluster that sandboxes are isolated:
#   1. a Job with the gvisor RuntimeClass runs on gVisor's sentry kernel, not the host's;
#   2. a gVisor Pod can reach a server Pod without a NetworkPolicy, and cannot once a default-deny egress
#      NetworkPolicy exists (the enforcer really drops the traffic; it also blocks the node's API server).
# Exits non-zero on any FAIL. Runs against $KUBECONFIG, or the local cluster's admin kubeconfig.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
export KUBECONFIG=${KUBECONFIG:-$AS_STATE/admin.kubeconfig}
NS=agent-sandbox-verify
IMAGE=${VERIFY_IMAGE:-localhost/busybox:agent-sandbox}
RUNTIME_CLASS=${RUNTIME_CLASS:-gvisor}
FAILS=0
pass() { echo "  PASS: $*"; }
fail() { echo "  FAIL: $*"; FAILS=$((FAILS + 1)); }
k() { KUBECTL "$@"; }

cleanup() { k delete namespace "$NS" --wait=false --ignore-not-found >/dev/null 2>&1; }
trap cleanup EXIT

# job NAME SCRIPT: a hardened, gVisor, run-once Job; prints its logs once it has finished.
job() {
  local name=$1 script=$2
  k -n "$NS" apply -f - >/dev/null <<EOF
apiVersion: batch/v1
kind: Job
metadata: {name: $name}
spec:
  backoffLimit: 0
  activeDeadlineSeconds: 120
  template:
    spec:
      runtimeClassName: $RUNTIME_CLASS
      restartPolicy: Never
      automountServiceAccountToken: false
      securityContext: {runAsNonRoot: true, runAsUser: 65532, seccompProfile: {type: RuntimeDefault}}
      containers:
      - name: probe
        image: $IMAGE
        imagePullPolicy: IfNotPresent
        command:
        - /bin/sh
        - -c
        - |-
$(printf '%s\n' "$script" | sed 's/^/          /')
        securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
        resources: {limits: {cpu: 200m, memory: 64Mi}}
EOF
  if ! k -n "$NS" wait --for=condition=complete "job/$name" --timeout=120s >/dev/null 2>&1; then
    echo "     job $name did not complete:" >&2
    k -n "$NS" get pods -l "job-name=$name" -o wide >&2
    k -n "$NS" describe pods -l "job-name=$name" 2>/dev/null | tail -n 12 >&2
  fi
  k -n "$NS" logs "job/$name" 2>/dev/null
}

main() {
  k get --raw /readyz >/dev/null 2>&1 || die "the cluster in $KUBECONFIG is not reachable; start it with: make up"
  cleanup; k wait --for=delete "namespace/$NS" --timeout=60s >/dev/null 2>&1
  k create namespace "$NS" >/dev/null || die "cannot create namespace $NS"
  k label namespace "$NS" pod-security.kubernetes.io/enforce=restricted >/dev/null

  echo "== 1. gVisor kernel check =="
  local out kernel
  out=$(job kernel 'cat /proc/version; dmesg 2>/dev/null | head -n 3')
  kernel=$(printf '%s\n' "$out" | head -n 1)
  echo "     kernel reported: ${kernel:-<nothing>}"
  if printf '%s' "$out" | grep -qi 'gvisor' && ! printf '%s' "$kernel" | grep -qF "$(uname -r)"; then
    pass "sandbox runs on the gVisor sentry kernel"
  else
    fail "sandbox did not report the gVisor kernel (host kernel is $(uname -r))"
  fi

  echo "== 2. NetworkPolicy egress enforcement check =="
  k -n "$NS" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: pong, labels: {app: pong}}
spec:
  automountServiceAccountToken: false
  securityContext: {runAsNonRoot: true, runAsUser: 65532, seccompProfile: {type: RuntimeDefault}}
  containers:
  - name: pong
    image: $IMAGE
    imagePullPolicy: IfNotPresent
    command: ["/bin/sh", "-c", "mkdir -p /tmp/www && echo PONG > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www"]
    securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
    resources: {limits: {cpu: 100m, memory: 32Mi}}
EOF
  k -n "$NS" wait --for=condition=Ready pod/pong --timeout=90s >/dev/null || { fail "server pod did not start"; finish; }
  local ip api
  ip=$(k -n "$NS" get pod pong -o jsonpath='{.status.podIP}')
  api=$(k get endpointslices -n default -l kubernetes.io/service-name=kubernetes -o jsonpath='{.items[0].endpoints[0].addresses[0]}:{.items[0].ports[0].port}')
  probe() { echo "for t in '$ip 8080' '${api%:*} ${api#*:}'; do if printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 3 \$t 2>/dev/null | grep -q -e PONG -e HTTP; then echo \"\$t CONNECTED\"; else echo \"\$t BLOCKED\"; fi; done"; }

  out=$(job baseline "$(probe)")
  if printf '%s' "$out" | grep -q "^$ip 8080 CONNECTED"; then pass "baseline connectivity works (got PONG)"
  else fail "baseline connectivity to the server pod failed: $(echo "$out" | tr '\n' ';')"; fi

  k -n "$NS" apply -f - >/dev/null <<EOF
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: default-deny-egress}
spec:
  podSelector: {}
  policyTypes: [Egress]
EOF
  out=$(job denied "$(probe)")
  if printf '%s' "$out" | grep -q "^$ip 8080 BLOCKED" && printf '%s' "$out" | grep -q "^${api%:*} ${api#*:} BLOCKED"; then
    pass "default-deny egress enforced (traffic blocked)"
  else
    fail "default-deny egress not enforced: $(echo "$out" | tr '\n' ';')"
  fi
  finish
}

finish() {
  if ((FAILS)); then echo "verify-cluster: $FAILS check(s) FAILED"; exit 1; fi
  exit 0
}

main "$@"
