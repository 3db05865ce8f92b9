//go:build e2e && !chaos

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/test/corpus"
)

// TestMain ends the suite as an operator would end a day: `agent-sandbox audit verify --against-cluster`,
// with the admin kubeconfig, on every audit log the suite's MCP servers wrote, for every call the cluster
// admitted while it ran. Each call made through an MCP server must be anchored in the cluster and complete
// in its log; each Job the suite submitted itself as the MCP server is reported as in no log.
func TestMain(m *testing.M) {
	start := time.Now()
	code := m.Run()
	if err := auditAtEnd(start); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL audit verify --against-cluster: %v\n", err)
		code = 1
	}
	os.Exit(code)
}

func auditAtEnd(start time.Time) error {
	dir, binary, kubeconfig := os.Getenv("E2E_DIR"), os.Getenv("E2E_BINARY"), os.Getenv("E2E_ADMIN_KUBECONFIG")
	if dir == "" || binary == "" || kubeconfig == "" {
		return nil // the tests themselves said what is missing
	}
	suiteLogs.Lock()
	logs := append([]string(nil), suiteLogs.paths...)
	suiteLogs.Unlock()
	if _, err := os.Stat(filepath.Join(dir, "audit.jsonl")); err == nil {
		logs = append(logs, filepath.Join(dir, "audit.jsonl"))
	}
	if len(logs) == 0 {
		fmt.Println("audit verify --against-cluster: no test of this run made a call through an MCP server; nothing to verify")
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	summary, err := corpus.AuditAgainstCluster(ctx, binary, kubeconfig, start, logs)
	if err != nil {
		return err
	}
	fmt.Println("audit verify --against-cluster: OK: " + summary)
	return nil
}
