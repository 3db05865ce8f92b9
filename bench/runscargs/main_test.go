package main

import (
	"strings"
	"testing"
)

// The argv of host runsc processes as the shim starts them (read from /proc/<pid>/cmdline on the node).
func TestSubcommand(t *testing.T) {
	for argv, want := range map[string]string{
		"/root/.cache/agent-sandbox/tools/gvisor/runsc\x00--root=/var/lib/agent-sandbox-local/runsc/k8s.io\x00--log=/x/log.json\x00--log-format=json\x00--platform=systrap\x00wait\x00c593df62fcc8\x00": "wait",
		"runsc\x00--root=/r\x00state\x00abc\x00": "state",
		"runsc\x00--root=/r\x00":                 "(none)",
	} {
		if got := subcommand(strings.Split(argv, "\x00")); got != want {
			t.Errorf("subcommand(%q) = %q, want %q", argv, got, want)
		}
	}
}
