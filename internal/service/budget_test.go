package service

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/audit"
)

// attackArgs are the review's arguments: 62 parameters of 1 KiB each (62 KiB per call), refused by the
// policy.
func attackArgs(i int) map[string]any {
	args := map[string]any{"namespace": "kube-system"}
	for j := range 62 {
		args[fmt.Sprintf("p%02d", j)] = strings.Repeat(string(rune('a'+(i+j)%26)), 1024)
	}
	return args
}

func logSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// TestAuditBytesPerCallAreBounded: 200 refused calls with 62×1 KiB parameters wrote 12 MiB of audit log;
// with the parameters recorded up to a bound (larger ones as size and SHA-256) they write a bounded amount.
func TestAuditBytesPerCallAreBounded(t *testing.T) {
	f := newFixture(t)
	f.svc.AuditLimits = AuditLimits{ClientBytes: -1, TotalBytes: -1} // the per-call bound alone
	before := logSize(t, f.log)
	var id string
	for i := range 200 {
		_, err := f.podStatus(context.Background(), attackArgs(i), nil)
		var se *Error
		if !errors.As(err, &se) || (se.Kind != KindDenied && se.Kind != KindInvalid) {
			t.Fatalf("call %d: %v", i, err)
		}
		id = se.RequestID
	}
	written := logSize(t, f.log) - before
	t.Logf("200 refused calls with 62×1 KiB parameters wrote %d bytes (%.1f KiB) of audit log, %d per call", written, float64(written)/1024, written/200)
	if written > 200*4<<10 {
		t.Errorf("200 calls wrote %d bytes, more than 4 KiB per call", written)
	}
	recs, err := audit.ReadFile(f.log, audit.Filter{RequestID: id})
	if err != nil {
		t.Fatal(err)
	}
	params, _ := recs[0].Fields["params"].(map[string]any)
	if params[audit.FieldTruncated] != true || params[audit.FieldTruncatedSHA256] == nil {
		// 62 summaries of ~110 bytes are over the 4 KiB of all parameters: the whole is summarised.
		t.Errorf("the parameters are recorded as %v", recs[0].Fields["params"])
	}
	if _, err := audit.VerifyFile(f.log); err != nil {
		t.Fatalf("audit verify: %v", err)
	}
}

// TestAuditBudgetPerClient: a client that made the server write its budget in a window is refused with a
// tool error naming the limit and the reset, the refusal is recorded once per window, other clients go on,
// and the budget comes back in the next window.
func TestAuditBudgetPerClient(t *testing.T) {
	f := newFixture(t)
	now := time.Date(2026, 5, 6, 7, 8, 0, 0, time.UTC)
	f.svc.Now = func() time.Time { return now }
	f.svc.AuditLimits = AuditLimits{ClientBytes: 64 << 10, TotalBytes: 1 << 20, Window: time.Minute}
	agent := WithClient(context.Background(), "stdio")
	before := logSize(t, f.log)
	refused := 0
	var refusal *Error
	for i := range 200 {
		_, err := f.podStatus(agent, attackArgs(i), nil)
		var se *Error
		if !errors.As(err, &se) {
			t.Fatalf("call %d: %v", i, err)
		}
		if se.Kind == KindRateLimited {
			refused++
			refusal = se
		}
	}
	written := logSize(t, f.log) - before
	t.Logf("200 calls with 62×1 KiB parameters against a 64 KiB/min budget: %d refused, %d bytes (%.1f KiB) of audit log", refused, written, float64(written)/1024)
	if refused == 0 || written > 64<<10+8<<10 {
		t.Fatalf("%d refused, %d bytes written: the budget does not hold", refused, written)
	}
	if !strings.Contains(refusal.Message, "64 KiB") || !strings.Contains(refusal.Message, "1m0s") ||
		!strings.Contains(refusal.Message, "until 2026-05-06T07:09:00Z") || !strings.Contains(refusal.Message, "in 1m0s") {
		t.Errorf("the refusal does not say the limit and the reset: %q", refusal.Message)
	}
	recs, err := audit.ReadFile(f.log, audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	noted := 0
	for _, r := range recs {
		if r.Event == EventAuditRateLimited {
			noted++
			if r.Fields["client"] != "stdio" || r.Fields["limit_bytes"] != float64(64<<10) || r.Fields["resets_at"] != "2026-05-06T07:09:00Z" {
				t.Errorf("refusal record %v", r.Fields)
			}
		}
	}
	if noted != 1 {
		t.Errorf("%d refusal records for %d refused calls in one window, want 1", noted, refused)
	}
	// Another client has its own budget.
	if _, err := f.podStatus(WithClient(context.Background(), "http:other"), map[string]any{"namespace": "demo-app"}, nil); err != nil {
		t.Errorf("another client is refused: %v", err)
	}
	// The next window gives the budget back.
	now = now.Add(time.Minute)
	if _, err := f.podStatus(agent, map[string]any{"namespace": "demo-app"}, nil); err != nil {
		t.Errorf("the next window: %v", err)
	}
	if _, err := audit.VerifyFile(f.log); err != nil {
		t.Fatalf("audit verify: %v", err)
	}
}

// TestAuditBudgetAllClients: over HTTP every session is a client; all of them together have a budget too.
func TestAuditBudgetAllClients(t *testing.T) {
	f := newFixture(t)
	f.svc.AuditLimits = AuditLimits{ClientBytes: 1 << 20, TotalBytes: 32 << 10}
	var last error
	for i := range 100 {
		_, last = f.podStatus(WithClient(context.Background(), fmt.Sprintf("http:s%d", i)), attackArgs(i), nil)
	}
	var se *Error
	if !errors.As(last, &se) || se.Kind != KindRateLimited || !strings.Contains(se.Message, "all clients together") {
		t.Fatalf("the 100th session: %v", last)
	}
}
