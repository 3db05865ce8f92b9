//go:build e2e

package e2e

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// The audit logs the suite's MCP servers wrote, kept after their tests' temporary folders are gone, so
// that the suite can end with `audit verify --against-cluster` on all of them (TestMain).
var suiteLogs struct {
	sync.Mutex
	paths []string
}

// keptAuditLog is an audit log path in a temporary folder of t, kept for the suite's final check.
func keptAuditLog(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	keepAuditLogsUnder(t, dir)
	return filepath.Join(dir, "audit.jsonl")
}

// keepAuditLogsUnder copies every audit.jsonl under dir, when t ends and before its temporary folders are
// removed (cleanups run last-registered first), into the suite's folder of logs.
func keepAuditLogsUnder(t *testing.T, dir string) {
	t.Helper()
	into := filepath.Join(os.Getenv("E2E_DIR"), "audit-logs")
	t.Cleanup(func() {
		_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "audit.jsonl" {
				return nil
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Errorf("keep audit log %s: %v", path, err)
				return nil
			}
			suiteLogs.Lock()
			defer suiteLogs.Unlock()
			name := fmt.Sprintf("%03d-%s.jsonl", len(suiteLogs.paths)+1, strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()))
			dst := filepath.Join(into, name)
			if err := os.MkdirAll(into, 0o700); err != nil {
				t.Errorf("keep audit log: %v", err)
				return nil
			}
			if err := os.WriteFile(dst, data, 0o600); err != nil {
				t.Errorf("keep audit log %s: %v", path, err)
				return nil
			}
			suiteLogs.paths = append(suiteLogs.paths, dst)
			return nil
		})
	})
}
