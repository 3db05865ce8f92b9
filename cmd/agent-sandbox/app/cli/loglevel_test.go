package cli

import "testing"

func TestParseLogLevel(t *testing.T) {
	for _, ok := range []string{"debug", "info", "warn", "warning", "error", "INFO"} {
		if _, err := ParseLogLevel(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "verbose", "inf", "info+4", "DEBUG-2", "trace"} {
		if _, err := ParseLogLevel(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
