package service

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/audit"
)

type recordingDeleter struct {
	deleted   []string
	inCluster map[string][]string // request ID -> Jobs the cluster has for it
}

func (d *recordingDeleter) JobsOf(_ context.Context, _ string, requestID string) ([]string, error) {
	return d.inCluster[requestID], nil
}

func (d *recordingDeleter) DeleteJob(_ context.Context, name string) error {
	d.deleted = append(d.deleted, name)
	return nil
}

// TestRecover: only the open calls of a dead server are closed; a live neighbour's open call, finished
// calls and calls of unnamed servers are left alone; the log's chain stays valid.
func TestRecover(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	log, err := audit.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	w := func(id, event, server string, fields map[string]any) {
		t.Helper()
		if fields == nil {
			fields = map[string]any{}
		}
		if server != "" {
			fields[FieldServer] = server
		}
		if err := log.Write(audit.Event{RequestID: id, Name: event, Tool: "k8s_get_pod_status", Fields: fields}); err != nil {
			t.Fatal(err)
		}
	}
	// A dead server's call that got as far as two sandbox runs (warm, then cold retry).
	w("req-dead", audit.EventToolRequest, "srv-dead", nil)
	w("req-dead", audit.EventSandboxStarted, "", map[string]any{"job": "warm-1"})
	w("req-dead", audit.EventSandboxStarted, "", map[string]any{"job": "cold-1"})
	// The dead server's call that finished.
	w("req-done", audit.EventToolRequest, "srv-dead", nil)
	w("req-done", audit.EventSandboxStarted, "", map[string]any{"job": "done-1"})
	w("req-done", audit.EventToolResult, "", map[string]any{"is_error": false})
	// A dead server's call that never reached the cluster.
	w("req-early", audit.EventToolRequest, "srv-dead", nil)
	// A live neighbour's call in progress.
	w("req-live", audit.EventToolRequest, "srv-live", nil)
	w("req-live", audit.EventSandboxStarted, "", map[string]any{"job": "live-1"})
	// A call from before servers named themselves.
	w("req-old", audit.EventToolRequest, "", nil)
	w("req-old", audit.EventSandboxStarted, "", map[string]any{"job": "old-1"})

	s := &Service{Audit: log, Instance: "srv-me"}
	// The server was killed after creating req-early's Job and before recording it.
	d := &recordingDeleter{inCluster: map[string][]string{"req-early": {"cold-early"}, "req-dead": {"cold-1"}}}
	asked := map[string]int{}
	rec, err := s.Recover(context.Background(), d, func(id string) bool { asked[id]++; return id == "srv-live" })
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.deleted, []string{"warm-1", "cold-1", "cold-early"}) {
		t.Errorf("deleted %v, want the dead calls' Jobs, recorded or found in the cluster, each once", d.deleted)
	}
	if len(rec) != 2 || rec[0].RequestID != "req-dead" || rec[1].RequestID != "req-early" {
		t.Errorf("recovered %+v", rec)
	}
	if asked["srv-dead"] != 1 {
		t.Errorf("liveness of srv-dead asked %d times, want once", asked["srv-dead"])
	}
	records, err := audit.ReadFile(path, audit.Filter{RequestID: "req-dead"})
	if err != nil {
		t.Fatal(err)
	}
	last := records[len(records)-1]
	if last.Event != audit.EventToolResult || last.Fields["abandoned"] != true || last.Fields["recovered_by"] != "srv-me" {
		t.Errorf("the abandoned call's last record %+v", last)
	}
	if _, err := audit.VerifyFile(path); err != nil {
		t.Errorf("the chain is broken after recovery: %v", err)
	}
	// A second start finds nothing more to do.
	rec, err = s.Recover(context.Background(), d, func(string) bool { return false })
	if err != nil || len(rec) != 1 || rec[0].RequestID != "req-live" {
		t.Errorf("second recovery (the neighbour died too) = %+v, %v; want only req-live", rec, err)
	}
}

// collectingDeleter is a recordingDeleter whose Jobs' credential agents report a credential (issued, never
// reported revoked: the server was killed).
type collectingDeleter struct{ recordingDeleter }

func (d *collectingDeleter) StopAndCollect(job string) []map[string]any {
	return []map[string]any{{"event": audit.EventCredentialIssued, "lease_id": "lease-" + job, "ttl_seconds": 600.0, "time": "2026-05-06T07:08:09Z"}}
}

// TestRecoverRecordsCredentials: a killed server's call has its credential's issue and (unknown) revocation
// recorded when the next server closes it.
func TestRecoverRecordsCredentials(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	log, err := audit.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	for _, ev := range []audit.Event{
		{RequestID: "req-dead", Name: audit.EventToolRequest, Tool: "k8s_get_pod_status", Fields: map[string]any{FieldServer: "srv-dead"}},
		{RequestID: "req-dead", Name: audit.EventSandboxStarted, Tool: "k8s_get_pod_status", Fields: map[string]any{"job": "cold-1"}},
	} {
		if err := log.Write(ev); err != nil {
			t.Fatal(err)
		}
	}
	s := &Service{Audit: log, Instance: "srv-new"}
	d := &collectingDeleter{}
	if _, err := s.Recover(context.Background(), d, func(string) bool { return false }); err != nil {
		t.Fatal(err)
	}
	recs, err := audit.ReadFile(path, audit.Filter{RequestID: "req-dead"})
	if err != nil {
		t.Fatal(err)
	}
	var events []string
	for _, r := range recs {
		events = append(events, r.Event)
		if r.Event == audit.EventCredentialRevoked && (r.Fields["status"] != "unknown" || r.Fields["lease_id"] != "lease-cold-1" || r.Fields["lease_ends_by"] != "2026-05-06T07:18:09Z") {
			t.Errorf("credential.revoked %v", r.Fields)
		}
	}
	want := []string{audit.EventToolRequest, audit.EventSandboxStarted, audit.EventCredentialIssued, audit.EventCredentialRevoked, audit.EventToolResult}
	if !slices.Equal(events, want) {
		t.Errorf("chain %v, want %v", events, want)
	}
	if _, err := audit.VerifyFile(path); err != nil {
		t.Fatal(err)
	}
}
