//go:build tools

// Package tools pins the Vault server (dev mode) that the local cluster and the integration tests use.
package tools

import _ "github.com/hashicorp/vault"
