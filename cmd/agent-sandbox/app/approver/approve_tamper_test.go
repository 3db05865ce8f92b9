package approver

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
)

// tamper runs one statement on the approvals database behind the store's back, as the MCP server, which
// owns that file, can.
func (e *approvalEnv) tamper(t *testing.T, stmt string, args ...any) {
	t.Helper()
	db, err := sql.Open("sqlite", e.db)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// The file's owner is bound by none of its schema's constraints.
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(context.Background(), `PRAGMA ignore_check_constraints = ON`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(context.Background(), stmt, args...); err != nil {
		t.Fatal(err)
	}
}

// TestApproveSignsOnlyTheParametersItShows: the MCP server writes a request whose params column says one
// thing (what the screen shows) and whose params_hash column is the hash of other parameters (what the token
// would carry, and what the webhook compares with the Job's). approve must never sign a hash it did not
// compute from the parameters it showed: it refuses, and no token for the hidden parameters exists.
func TestApproveSignsOnlyTheParametersItShows(t *testing.T) {
	e := newApprovalEnv(t)
	shown := map[string]any{"dir": "infra/staging", "auto_approve": true, "parallelism": 4}
	hidden := map[string]any{"dir": "infra/prod", "auto_approve": true, "parallelism": 4}
	r := e.createRequest(t, func(r *approval.Request) { r.Params = shown })
	hiddenHash, err := approval.ParamsHash(r.Tool, hidden)
	if err != nil {
		t.Fatal(err)
	}
	e.tamper(t, `UPDATE requests SET params_hash = ? WHERE id = ?`, hiddenHash, r.ID)

	s := startPTY(t, "approve", r.ID, "--db", e.db, "--key", e.keyPath, "--audience", approveAudience, "--ttl", "10m")
	// Answer the prompts if approve asks them (the old code does); a refusing approve never asks.
	if s.Shows("or \"yes\": ") {
		s.Send("yes\n")
		if s.Shows("Passphrase for approver key") {
			s.SendSecret(approvePassphrase + "\n")
		}
	}
	code := s.Wait()
	out := s.Output()
	if strings.Contains(out, "infra/prod") {
		t.Errorf("the screen showed the hidden parameters; the test is wrong:\n%s", out)
	}
	if code != 4 || !strings.Contains(out, "changed behind the store's back") {
		t.Errorf("approve on a request whose params_hash is not the hash of its parameters: exit %d, want 4 (tampered):\n%s", code, out)
	}
	// Whatever the exit code: no grant may carry the hidden parameters' hash.
	tokens, err := e.store.Consume(context.Background(), r.ID, r.Tool, hiddenHash)
	if err == nil {
		v := approval.NewVerifier(e.key.KeySet(), approveAudience, time.Now)
		want := approval.Expectation{Tool: r.Tool, ParamsHash: hiddenHash, Namespace: r.Namespace}
		if _, verr := v.ConsumeAll(context.Background(), tokens, want, newMapLedger()); verr == nil {
			t.Fatalf("the webhook's verifier accepts the approval for %v, which the approver never saw (shown: %v)", hidden, shown)
		}
	}
}

// TestApproveSignsTheRequestItShowed: the MCP server rewrites the request -- consistently: parameters and
// their hash, and the plan it is bound to -- while the approver reads the screen. approve must sign what it
// showed, or nothing; never the request as it reads it again after the confirmation.
func TestApproveSignsTheRequestItShowed(t *testing.T) {
	shown := map[string]any{"dir": "infra/staging", "auto_approve": true, "parallelism": 4}
	hidden := map[string]any{"dir": "infra/prod", "auto_approve": true, "parallelism": 4}
	for name, rewrite := range map[string]func(t *testing.T, e *approvalEnv, r *approval.Request) approval.Expectation{
		"parameters": func(t *testing.T, e *approvalEnv, r *approval.Request) approval.Expectation {
			canon, err := approval.CanonicalParams(hidden)
			if err != nil {
				t.Fatal(err)
			}
			hash, err := approval.ParamsHash(r.Tool, hidden)
			if err != nil {
				t.Fatal(err)
			}
			e.tamper(t, `UPDATE requests SET params = ?, params_hash = ? WHERE id = ?`, string(canon), hash, r.ID)
			return approval.Expectation{Tool: r.Tool, ParamsHash: hash, Namespace: r.Namespace}
		},
		"namespace": func(t *testing.T, e *approvalEnv, r *approval.Request) approval.Expectation {
			e.tamper(t, `UPDATE requests SET namespace = 'prod' WHERE id = ?`, r.ID)
			return approval.Expectation{Tool: r.Tool, ParamsHash: r.ParamsHash, Namespace: "prod"}
		},
		"plan": func(t *testing.T, e *approvalEnv, r *approval.Request) approval.Expectation {
			other := strings.Repeat("e", 64)
			e.tamper(t, `UPDATE requests SET plan_digest = ? WHERE id = ?`, other, r.ID)
			return approval.Expectation{Tool: r.Tool, ParamsHash: r.ParamsHash, Namespace: r.Namespace, PlanDigest: other}
		},
	} {
		t.Run(name, func(t *testing.T) {
			e := newApprovalEnv(t)
			r := e.createRequest(t, func(r *approval.Request) { r.Params = shown })
			s := startPTY(t, "approve", r.ID, "--db", e.db, "--key", e.keyPath, "--audience", approveAudience, "--ttl", "10m")
			s.Expect("or \"yes\": ")
			want := rewrite(t, e, r)
			s.Send("yes\n")
			if s.Shows("Passphrase for approver key") {
				s.SendSecret(approvePassphrase + "\n")
			}
			code := s.Wait()
			out := s.Output()
			if code != 4 || !strings.Contains(out, "changed while you read it") {
				t.Errorf("approve after the request changed under the screen: exit %d, want 4 (tampered):\n%s", code, out)
			}
			db, err := sql.Open("sqlite", e.db)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			rows, err := db.Query(`SELECT token FROM grants WHERE request_id = ?`, r.ID)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			for rows.Next() {
				var tok string
				if err := rows.Scan(&tok); err != nil {
					t.Fatal(err)
				}
				v := approval.NewVerifier(e.key.KeySet(), approveAudience, time.Now)
				if _, err := v.ConsumeAll(context.Background(), []string{tok}, want, newMapLedger()); err == nil {
					t.Fatalf("the webhook's verifier accepts the approval for %+v, which the screen never showed", want)
				}
			}
		})
	}
}

// TestApproveScreenEscapesEveryStoredField: every field of the screen comes from the MCP server's file, the
// token ID of a grant too. A pending request with a token expiry and a grant whose token ID holds terminal
// escapes (cursor up, erase line) could rewrite the lines above it -- the parameters -- on the approver's
// terminal. The screen must never carry an escape character from the database.
func TestApproveScreenEscapesEveryStoredField(t *testing.T) {
	e := newApprovalEnv(t)
	r := e.createRequest(t, nil)
	evil := "\x1b[6A\x1b[2K  dir          = \"infra/staging\"\x1b[6B"
	future := time.Now().Add(10 * time.Minute).UnixNano()
	e.tamper(t, `UPDATE requests SET token_expiry = ? WHERE id = ?`, future, r.ID)
	e.tamper(t, `INSERT INTO grants (request_id, approver, token, token_id, token_expiry, decided_at) VALUES (?, 'bob', 'x', ?, ?, ?)`,
		r.ID, evil, future, time.Now().UnixNano())
	code, out, errOut := runApprovalCLI(t, strings.NewReader(""), "approvals", "show", r.ID, "--db", e.db)
	if strings.ContainsRune(out+errOut, 0x1b) {
		t.Errorf("approvals show wrote an escape character from the database (exit %d):\n%q", code, out+errOut)
	}
	s := startPTY(t, "approve", r.ID, "--db", e.db, "--key", e.keyPath, "--audience", approveAudience)
	if s.Shows("or \"yes\": ") {
		s.Send("no\n")
	}
	s.Wait()
	if strings.ContainsRune(s.Output(), 0x1b) {
		t.Errorf("approve's screen carries an escape character from the database:\n%q", s.Output())
	}
}
