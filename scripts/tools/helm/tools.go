//go:build tools

// Package tools pins the helm CLI used to lint, render and install charts/agent-sandbox.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
