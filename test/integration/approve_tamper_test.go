//go:build integration

package integration

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app"
	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	approvalstore "github.com/agent-sandbox/agent-sandbox/internal/approval/store"
	"github.com/agent-sandbox/agent-sandbox/test/harness"
)

// TestApproveRewrittenWhileReadNotAdmitted: the MCP server owns the approvals database. It files a request
// to read the logs of pod web-1 and either stores the params hash of pod db-0 next to it, or rewrites the row
// consistently (parameters and their hash) to pod db-0 while the person reads the approve screen. The
// person confirms what they read. No approval may come out of it that the real webhook, on the real API
// server, accepts for the db-0 Job.
func TestApproveRewrittenWhileReadNotAdmitted(t *testing.T) {
	// A policy in which a read tool needs approval: a tool without a saved plan, so that approve needs no
	// terraform to show it.
	raw, err := os.ReadFile("../../policy/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const anchor = "  - name: k8s_pod_logs\n"
	i := strings.Index(string(raw), anchor)
	j := strings.Index(string(raw)[i:], "    tier: read\n")
	if i < 0 || j < 0 {
		t.Fatal("policy layout changed")
	}
	at := i + j + len("    tier: read\n")
	modified := string(raw[:at]) + "    requiresApproval: true\n" + string(raw[at:])
	policyFile := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policyFile, []byte(modified), 0o600); err != nil {
		t.Fatal(err)
	}
	env := startWebhookEnvWith(t, policyFile)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	defer env.corpus.Cleanup(context.Background())
	p := env.corpus.Policy

	dir := t.TempDir()
	db := filepath.Join(dir, "approvals.db")
	keyPath := filepath.Join(dir, "approver.key")
	const pass = "correct horse battery staple"
	if err := env.corpus.Approver.WriteFile(keyPath, []byte(pass), approval.WithScryptWorkFactor(10)); err != nil {
		t.Fatal(err)
	}
	store, err := approvalstore.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	tool, err := p.Tool("k8s_pod_logs")
	if err != nil {
		t.Fatal(err)
	}
	shown, err := tool.Invoke(map[string]any{"namespace": "demo-app", "pod": "web-1"})
	if err != nil {
		t.Fatal(err)
	}
	hiddenParams := map[string]any{"namespace": "demo-app", "pod": "db-0"}
	hidden, err := tool.Invoke(hiddenParams)
	if err != nil {
		t.Fatal(err)
	}
	canon, err := approval.CanonicalParams(hidden.Params)
	if err != nil {
		t.Fatal(err)
	}
	hash, err := approval.ParamsHash(tool.Name, hidden.Params)
	if err != nil {
		t.Fatal(err)
	}
	exec := func(t *testing.T, stmt string, args ...any) {
		t.Helper()
		conn, err := sql.Open("sqlite", db)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, stmt, args...); err != nil {
			t.Fatal(err)
		}
	}
	for _, mode := range []string{"hash only, before approve", "consistently, while the screen is read"} {
		t.Run(mode, func(t *testing.T) {
			req, err := store.CreateRequest(ctx, approval.Request{Tool: tool.Name, Params: shown.Params, Namespace: shown.TargetNamespace})
			if err != nil {
				t.Fatal(err)
			}
			if mode == "hash only, before approve" {
				// The row shows web-1 and carries db-0's hash.
				exec(t, `UPDATE requests SET params_hash = ? WHERE id = ?`, hash, req.ID)
			}

			s := harness.StartTestTerminal(t, func(tty *os.File) int {
				return app.Main(ctx, []string{"approve", req.ID, "--db", db, "--key", keyPath, "--audience", p.Spec.ClusterID,
					"--policy", policyFile, "--ttl", "10m"}, tty, tty, tty)
			}, harness.TurnPages())
			if !s.Shows(`or "yes": `) {
				code := s.Wait()
				t.Logf("approve refused before asking: exit %d\n%s", code, s.Output())
				if code != 4 {
					t.Errorf("approve of a tampered request: exit %d, want 4", code)
				}
				return
			}
			if out := s.Output(); !strings.Contains(out, `"web-1"`) || strings.Contains(out, "db-0") {
				t.Fatalf("the screen does not show the request as filed:\n%s", out)
			}
			if mode != "hash only, before approve" {
				// The MCP server rewrites the row while the person reads.
				exec(t, `UPDATE requests SET params = ?, params_hash = ? WHERE id = ?`, string(canon), hash, req.ID)
			}
			s.Send("yes\n")
			if s.Shows("Passphrase for approver key") {
				s.SendSecret(pass + "\n")
			}
			code := s.Wait()
			t.Logf("approve: exit %d\n%s", code, s.Output())

			conn, err := sql.Open("sqlite", db)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			rows, err := conn.QueryContext(ctx, `SELECT token FROM grants WHERE request_id = ?`, req.ID)
			if err != nil {
				t.Fatal(err)
			}
			var tokens []string
			for rows.Next() {
				var tok string
				if err := rows.Scan(&tok); err != nil {
					t.Fatal(err)
				}
				tokens = append(tokens, tok)
			}
			rows.Close()
			for _, tok := range tokens {
				job, err := env.corpus.CreateJob(ctx, env.corpus.Job(tool.Name, hiddenParams, tok), false)
				if err == nil {
					t.Fatalf("the webhook admitted Job %s, reading the logs of pod db-0, on the approval of a screen that showed pod web-1", job.Name)
				}
				t.Logf("the Job for the hidden parameters was refused: %v", err)
			}
			if code != 4 {
				t.Errorf("approve of a tampered request: exit %d, want 4", code)
			}
		})
	}
}
