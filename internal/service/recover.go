package service

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/agent-sandbox/agent-sandbox/internal/audit"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
)

// FieldServer is the tool.request field naming the server instance that took the call.
const FieldServer = "server"

// JobDeleter finds and deletes the sandbox Jobs of a call (sandbox.Runner).
type JobDeleter interface {
	DeleteJob(ctx context.Context, name string) error
	// JobsOf finds a call's Jobs in the cluster: a server killed between creating a Job and recording it
	// left no sandbox.started to go by.
	JobsOf(ctx context.Context, tool, requestID string) ([]string, error)
}

// CredentialCollector is a JobDeleter that can also say what a deleted Job's credential agent reported
// (sandbox.Runner.StopAndCollect): Recover then records the abandoned call's credential events.
type CredentialCollector interface {
	StopAndCollect(job string) []map[string]any
}

// Recovered is one abandoned call that Recover closed.
type Recovered struct {
	RequestID string
	Tool      string
	Jobs      []string
}

// Recover closes the calls that a killed server left open in the audit log: a tool.request with no
// tool.result, taken by a server instance that no longer runs (alive reports false). Each such call's
// sandbox Jobs are deleted (their Pods get SIGTERM, so the credential agent revokes its Vault lease) and
// the call's chain is completed with a tool.result saying it was abandoned. Calls of live servers, and
// calls from before servers named themselves, are left alone.
func (s *Service) Recover(ctx context.Context, jobs JobDeleter, alive func(id string) bool) ([]Recovered, error) {
	records, err := audit.ReadFile(s.Audit.Path(), audit.Filter{})
	if err != nil && len(records) == 0 {
		return nil, fmt.Errorf("read the audit log: %w", err)
	}
	type open struct {
		tool, server string
		jobs         []string
		seen         map[string]bool
	}
	calls := map[string]*open{}
	var order []string
	for _, r := range records {
		switch r.Event {
		case audit.EventToolRequest:
			srv, _ := r.Fields[FieldServer].(string)
			calls[r.RequestID] = &open{tool: r.Tool, server: srv, seen: map[string]bool{}}
			order = append(order, r.RequestID)
		case audit.EventSandboxStarted:
			if c := calls[r.RequestID]; c != nil {
				if j, _ := r.Fields["job"].(string); j != "" && !c.seen[j] {
					c.seen[j] = true
					c.jobs = append(c.jobs, j)
				}
			}
		case audit.EventToolResult:
			delete(calls, r.RequestID)
		}
	}
	var out []Recovered
	var errs []error
	dead := map[string]bool{}
	for _, id := range order {
		c := calls[id]
		if c == nil || c.server == "" || c.server == s.Instance {
			continue
		}
		isDead, known := dead[c.server]
		if !known {
			isDead = !alive(c.server)
			dead[c.server] = isDead
		}
		if !isDead {
			continue
		}
		found, err := jobs.JobsOf(ctx, c.tool, id)
		if err != nil {
			errs = append(errs, fmt.Errorf("find the Jobs of abandoned call %s: %w", id, err))
			continue
		}
		for _, j := range found {
			if !c.seen[j] {
				c.seen[j] = true
				c.jobs = append(c.jobs, j)
			}
		}
		var deleted []string
		collector, _ := jobs.(CredentialCollector)
		for _, j := range c.jobs {
			if collector != nil {
				// The Pod's credential agent revokes on SIGTERM; what it reports (and what it issued) goes into the
				// abandoned call's chain, and a credential with no reported revocation is closed as unknown.
				events := collector.StopAndCollect(j)
				s.recordCredentials(id, c.tool, events)
			}
			if err := jobs.DeleteJob(ctx, j); err != nil {
				errs = append(errs, fmt.Errorf("delete Job %s of abandoned call %s: %w", j, id, err))
				continue
			}
			deleted = append(deleted, j)
		}
		sort.Strings(deleted)
		if err := s.Audit.Write(audit.Event{RequestID: id, Name: audit.EventToolResult, Tool: c.tool, Fields: map[string]any{
			"is_error": true, "kind": string(KindFailed), audit.FieldAbandoned: true, "recovered_by": s.Instance, audit.FieldJobsDeleted: deleted,
			"reason": "abandoned: the MCP server " + c.server + " stopped during the call; its sandbox Jobs were deleted when the next server started"}}); err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, Recovered{RequestID: id, Tool: c.tool, Jobs: deleted})
	}
	return out, errors.Join(errs...)
}

// recordCredentials writes an abandoned call's credential events, as runOnce does for a call that ends.
func (s *Service) recordCredentials(id, tool string, events []map[string]any) {
	c := &call{s: s, id: id, tool: tool, progress: func(string, int, int) {}}
	res := &sandbox.Result{CredentialEvents: events}
	c.credentialEvents(res, audit.EventCredentialIssued)
	c.credentialEvents(res, audit.EventCredentialRevoked)
	c.unrevoked(events)
	if c.auditErr != nil && s.OnAuditError != nil {
		s.OnAuditError(id, c.auditErr)
	}
}
