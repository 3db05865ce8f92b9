#!/usr/bin/env bash
# make install-client: installs what an MCP client needs to start `agent-sandbox mcp` with no flags, for one
# person: the one who ran sudo (SUDO_USER), else whoever runs this, or INSTALL_USER=name (root only).
#
#   ~/.local/bin/agent-sandbox                 the binary (BIN, default bin/agent-sandbox)
#   ~/.config/agent-sandbox/policy.yaml        the policy the webhook enforces (the previous one kept as .bak): the
#                                              local cluster's profile's (make up PROFILE=gke), else policy/policy.yaml
#   ~/.config/agent-sandbox/workspaces/NAME/   each folder of terraform/, unless that workspace is already there
#   ~/.config/agent-sandbox/mcp.kubeconfig     the MCP server's kubeconfig (sandbox namespace only), written by
#                                              `agent-sandbox kubeconfig refresh` when a kubeconfig that may
#                                              request it is at hand: $KUBECONFIG, else the local cluster's
#
# Everything belongs to that person. (~/.config is $XDG_CONFIG_HOME when installing for oneself with it set.)
set -euo pipefail
. "$(dirname "$0")/lib.sh"
BIN_SRC=$(cd "$(dirname "${1:-$AS_ROOT/bin/agent-sandbox}")" && pwd)/$(basename "${1:-bin/agent-sandbox}")
cd "$AS_ROOT"
[ -x "$BIN_SRC" ] || die "no agent-sandbox binary at $BIN_SRC; run: make install-client (it builds one)"

me=$(id -un)
who=${INSTALL_USER:-$(sudo_user)}
who=${who:-$me}
[ "$who" = "$me" ] || [ "$(id -u)" = 0 ] || die "installing for $who needs root: sudo make install-client INSTALL_USER=$who"
getent passwd "$who" >/dev/null || die "no such user: $who"
home=$(home_of "$who")
[ -d "$home" ] || die "$who has no home folder ($home)"
if [ "$who" = "$me" ]; then home=$HOME; fi
cfg=$(client_config_dir "$who")
bindir=$home/.local/bin
uid=$(id -u "$who") gid=$(id -g "$who")
own=()
[ "$(id -u)" = 0 ] && own=(-o "$uid" -g "$gid")

# mkdirs MODE DIR...: make each missing folder (parents first) owned by the person. An existing folder keeps
# its owner and mode. Root refuses to write through a symbolic link into someone's home.
mkdirs() {
  local mode=$1 d; shift
  for d in "$@"; do
    [ -L "$d" ] && [ "$(id -u)" = 0 ] && [ "$who" != "$me" ] && die "$d is a symbolic link; refusing to install through it as root"
    [ -d "$d" ] || install -d -m "$mode" "${own[@]}" "$d"
  done
}
mkdirs 0755 "$home/.local" "$bindir"
mkdirs 0700 "$(dirname "$cfg")" "$cfg" "$cfg/workspaces"

install -m 0755 "${own[@]}" "$BIN_SRC" "$bindir/agent-sandbox"
log "installed $bindir/agent-sandbox ($("$bindir/agent-sandbox" --version))"

# The local cluster's profile's policy (scripts/lib.sh: policy/policy.yaml, or for gke that policy placed on
# the GKE-shaped node), which is the one its webhook enforces.
policy_src=$(profile_policy)
if [ -f "$cfg/policy.yaml" ] && ! cmp -s "$policy_src" "$cfg/policy.yaml"; then
  install -m 0644 "${own[@]}" "$cfg/policy.yaml" "$cfg/policy.yaml.bak"
  log "kept the previous policy as $cfg/policy.yaml.bak"
fi
install -m 0644 "${own[@]}" "$policy_src" "$cfg/policy.yaml"
log "installed $cfg/policy.yaml"

for ws in terraform/*/; do
  name=$(basename "$ws") dest=$cfg/workspaces/$(basename "$ws")
  if [ -e "$dest" ]; then log "kept $dest (yours; remove it to install the repository's again)"; continue; fi
  mkdirs 0700 "$dest"
  for f in "$ws"*; do [ -f "$f" ] && install -m 0644 "${own[@]}" "$f" "$dest/"; done
  log "installed the $name workspace in $dest"
done

# The MCP kubeconfig: requested with a kubeconfig that may, when there is one at hand.
admin_kc=${KUBECONFIG:-}
if [ -z "$admin_kc" ] && [ -r "$AS_STATE/admin.kubeconfig" ]; then admin_kc=$AS_STATE/admin.kubeconfig; fi
refresh=("$bindir/agent-sandbox" kubeconfig refresh --policy "$cfg/policy.yaml" --out "$cfg/mcp.kubeconfig")
[ "$(id -u)" = 0 ] && refresh+=(--owner "$who")
if [ -n "$admin_kc" ]; then
  if "${refresh[@]}" --kubeconfig "$admin_kc" >&2; then :; else
    log "WARNING: could not write $cfg/mcp.kubeconfig with $admin_kc (is agent-sandbox deployed? make deploy); the rest is installed"
  fi
elif [ -f "$cfg/mcp.kubeconfig" ]; then
  log "kept $cfg/mcp.kubeconfig"
else
  log "no MCP kubeconfig yet: run sudo make deploy (local cluster), or: ${refresh[*]} --kubeconfig YOUR_KUBECONFIG"
fi

if [ "$who" = "$me" ] && [[ ":$PATH:" != *":$bindir:"* ]]; then
  log "note: $bindir is not on your PATH; add it (most login shells do once it exists: log in again) or use $bindir/agent-sandbox in client configs"
fi
log "done: point your MCP client at the command \"agent-sandbox\" with the arguments [\"mcp\"] (e.g. claude mcp add agent-sandbox -- agent-sandbox mcp); see examples/"
