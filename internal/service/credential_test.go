package service

import (
	"context"
	"fmt"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"

	"github.com/agent-sandbox/agent-sandbox/internal/audit"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
)

// TestCancelledCallRecordsItsCredential: a call cancelled after its credential was issued still writes
// credential.issued and credential.revoked: as the agent reported them while the Job was deleted, or, when
// no revocation was reported, a credential.revoked with status unknown that names the lease and its end.
func TestCancelledCallRecordsItsCredential(t *testing.T) {
	issued := map[string]any{"event": audit.EventCredentialIssued, "lease_id": "kubernetes/creds/x/abc", "ttl_seconds": 600.0,
		"time": "2026-05-06T07:08:09Z", "service_account": "v-sa"}
	for _, tc := range []struct {
		name   string
		events []map[string]any
		status string
	}{
		{"the agent reported its revocation", []map[string]any{issued, {"event": audit.EventCredentialRevoked, "lease_id": "kubernetes/creds/x/abc"}}, ""},
		{"no revocation reported", []map[string]any{issued}, "unknown"},
		{"Vault refused the revocation", []map[string]any{issued, {"event": "credential.revoke_failed", "lease_id": "kubernetes/creds/x/abc", "error": "503"}}, "failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.run.afterSlot = func(_ context.Context, job *batchv1.Job) (*sandbox.Result, error) {
				return &sandbox.Result{JobName: job.Name, ExitCode: -1, CredentialEvents: tc.events}, context.Canceled
			}
			_, err := f.podStatus(context.Background(), map[string]any{"namespace": "demo-app"}, nil)
			var se *Error
			if !asError(err, &se) {
				t.Fatalf("got %v", err)
			}
			recs, err := audit.ReadFile(f.log, audit.Filter{RequestID: se.RequestID})
			if err != nil {
				t.Fatal(err)
			}
			var chain []string
			var revoked *audit.Record
			for i, r := range recs {
				chain = append(chain, r.Event)
				if r.Event == audit.EventCredentialRevoked {
					revoked = &recs[i]
				}
			}
			// (The fake reports no stages, so no sandbox.started.)
			want := []string{audit.EventToolRequest, audit.EventGuardrailDecision, audit.EventCredentialIssued,
				audit.EventSandboxCompleted, audit.EventCredentialRevoked, audit.EventToolResult}
			if len(chain) != len(want) {
				t.Fatalf("chain %v, want %v", chain, want)
			}
			for i := range want {
				if chain[i] != want[i] {
					t.Fatalf("chain %v, want %v", chain, want)
				}
			}
			if revoked.Fields["lease_id"] != "kubernetes/creds/x/abc" {
				t.Errorf("credential.revoked %v", revoked.Fields)
			}
			if tc.status != "" && (revoked.Fields["status"] != tc.status || revoked.Fields["lease_ends_by"] != "2026-05-06T07:18:09Z") {
				t.Errorf("credential.revoked %v, want status %s and the lease's end", revoked.Fields, tc.status)
			}
		})
	}
}

func asError(err error, se **Error) bool {
	e, ok := err.(*Error)
	*se = e
	return ok
}

// TestWithheldResultIsAToolError: a run whose credential agent withheld the result because Vault failed the
// revocation (credential.revoke_failed, then a tool.result error) is a failed call that names the reason,
// and its chain records the failed revocation (credential.revoked, status failed) before its tool.result.
func TestWithheldResultIsAToolError(t *testing.T) {
	const withheld = "the credential could not be revoked; the tool's result is withheld"
	f := newFixture(t)
	f.run.afterSlot = func(_ context.Context, job *batchv1.Job) (*sandbox.Result, error) {
		return &sandbox.Result{JobName: job.Name, ExitCode: 0, ResultError: withheld, CredentialEvents: []map[string]any{
			{"event": audit.EventCredentialIssued, "lease_id": "kubernetes/creds/x/abc", "ttl_seconds": 600.0, "time": "2026-05-06T07:08:09Z"},
			{"event": "credential.revoke_failed", "lease_id": "kubernetes/creds/x/abc", "error": "gave up after 8s: Vault is sealed"},
		}}, nil
	}
	out, err := f.podStatus(context.Background(), map[string]any{"namespace": "demo-app"}, nil)
	var se *Error
	if !asError(err, &se) || se.Kind != KindFailed || !strings.Contains(se.Message, withheld) {
		t.Fatalf("got %v, %v; want a failed call saying %q", out, err, withheld)
	}
	recs, err := audit.ReadFile(f.log, audit.Filter{RequestID: se.RequestID})
	if err != nil {
		t.Fatal(err)
	}
	n := len(recs)
	if n < 2 || recs[n-2].Event != audit.EventCredentialRevoked || recs[n-2].Fields["status"] != "failed" ||
		recs[n-1].Event != audit.EventToolResult || recs[n-1].Fields["is_error"] != true ||
		!strings.Contains(fmt.Sprint(recs[n-1].Fields["reason"]), withheld) {
		t.Errorf("chain ends %v; want credential.revoked (failed) then tool.result naming the withheld result", recs[max(0, n-2):])
	}
}
