#!/usr/bin/env bash
# Builds localhost/agent-sandbox:dev without Docker and imports it into the local cluster's containerd.
# One image serves the webhook, the credential agent and the in-sandbox tool runner:
#   /agent-sandbox                     the binary (static, CGO_ENABLED=0)
#   /usr/local/bin/terraform           Terraform (from this machine)
#   /usr/share/terraform/providers     hashicorp/kubernetes built from the Go module proxy, as a filesystem
#                                      mirror, so `terraform init` needs no registry (/etc/terraform.rc)
#   /etc/ssl/certs/ca-certificates.crt CA certificates
# It runs as the non-root user 65532.
#   IMAGE=localhost/agent-sandbox:dev  IMPORT=0 to only write the tarball
set -euo pipefail
. "$(dirname "$0")/lib.sh"
IMAGE=${IMAGE:-localhost/agent-sandbox:dev}
OUT=$AS_STATE/images
TERRAFORM=${TERRAFORM:-$(command -v terraform || true)}
[ -n "$TERRAFORM" ] && [ -x "$TERRAFORM" ] || die "terraform is not installed (expected at /usr/local/bin/terraform); the runner image needs it"
"$AS_ROOT/scripts/build-tools.sh" terraform-provider-kubernetes >&2
mkdir -p "$OUT"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT

log "building the agent-sandbox binary"
(cd "$AS_ROOT" && CGO_ENABLED=0 GOFLAGS=-buildvcs=false go build -trimpath \
  -ldflags "-s -w -X github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app.version=$(git -C "$AS_ROOT" describe --always --dirty 2>/dev/null || echo dev)" \
  -o "$work/agent-sandbox" ./cmd/agent-sandbox)
cat > "$work/terraform.rc" <<'RC'
# Providers come only from the image's filesystem mirror: nothing is fetched from a registry.
provider_installation {
  filesystem_mirror {
    path    = "/usr/share/terraform/providers"
    include = ["registry.terraform.io/hashicorp/kubernetes"]
  }
}
disable_checkpoint = true
RC
(cd "$AS_ROOT" && CGO_ENABLED=0 go build -trimpath -o "$AS_CACHE/imagebuild" ./scripts/imagebuild)
"$AS_CACHE/imagebuild" -name "$IMAGE" -out "$OUT/agent-sandbox.tar" \
  -file "/agent-sandbox=$work/agent-sandbox:0755" \
  -file "/usr/local/bin/terraform=$TERRAFORM:0755" \
  -dir "/usr/share/terraform/providers/registry.terraform.io=$(dir_tfprovider)/registry.terraform.io" \
  -file "/etc/terraform.rc=$work/terraform.rc:0644" \
  -file "/etc/ssl/certs/ca-certificates.crt=/etc/ssl/certs/ca-certificates.crt:0644" \
  -passwd nonroot:65532:65532 -mkdir /tmp:1777 \
  -env TF_CLI_CONFIG_FILE=/etc/terraform.rc -env HOME=/tmp -env CHECKPOINT_DISABLE=1 -env TF_IN_AUTOMATION=1 \
  -user 65532:65532 -entrypoint /agent-sandbox
log "wrote $OUT/agent-sandbox.tar ($(du -m "$OUT/agent-sandbox.tar" | cut -f1) MB)"
if [ "${IMPORT:-1}" = 1 ]; then
  "$(bin_containerd ctr)" -a "$AS_STATE/run/containerd.sock" -n k8s.io images import "$OUT/agent-sandbox.tar" >/dev/null \
    || die "import into containerd failed; is the local cluster up (make up)?"
  log "imported $IMAGE"
fi
