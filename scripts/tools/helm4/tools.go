//go:build tools

// Package tools pins the Helm 4 CLI that the chart is also linted, installed and tested with
// (HELM=helm4 picks it for make deploy; the chart's integration tests run it beside Helm 3).
package tools

import _ "helm.sh/helm/v4/cmd/helm"
