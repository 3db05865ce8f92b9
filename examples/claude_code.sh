#!/usr/bin/env sh
# Register agent-sandbox with Claude Code (stdio). After `sudo make deploy && sudo make install-client` (or
# `make install-client` as yourself, with a kubeconfig of your cluster in $KUBECONFIG), the server finds its
# kubeconfig, policy and workspaces in ~/.config/agent-sandbox, so it needs no flag. If ~/.local/bin is not
# on your PATH, write "$HOME/.local/bin/agent-sandbox" instead of agent-sandbox.
claude mcp add agent-sandbox -- agent-sandbox mcp
