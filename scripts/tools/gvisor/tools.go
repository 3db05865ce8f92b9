//go:build tools

// Package tools pins gVisor's runsc and its containerd shim. The module proxy serves gVisor's "go" branch
// only as pseudo-versions.
package tools

import (
	_ "gvisor.dev/gvisor/runsc"
	_ "gvisor.dev/gvisor/shim"
)
