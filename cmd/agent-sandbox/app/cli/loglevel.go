package cli

import (
	"fmt"
	"log/slog"
	"strings"
)

// LogLevelHelp describes --log-level's values.
const LogLevelHelp = "debug, info, warn or error"

// ParseLogLevel reads --log-level. Unlike slog.Level's own parser it accepts only the four names, so a
// typo ("inf", "verbose", "info+4") is a usage error instead of a silently different level.
func ParseLogLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return slog.LevelInfo, fmt.Errorf("--log-level %q: want %s", s, LogLevelHelp)
}
