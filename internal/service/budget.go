package service

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/audit"
)

// Default bounds of what calls write to the audit log (AuditLimits).
const (
	DefaultAuditParamBytes  = 512
	DefaultAuditParamsBytes = 4 << 10
	DefaultAuditClientBytes = 1 << 20
	DefaultAuditTotalBytes  = 4 << 20
	DefaultAuditWindow      = time.Minute
)

// AuditLimits bound the audit bytes the agent can make the server write. Every field's zero value selects
// its default; a negative byte limit switches that limit off.
//
// The agent chooses a call's arguments, and every call writes its tool.request with them, also a call the
// policy refuses at once. So the arguments are recorded only up to ParamBytes per parameter and
// ParamsBytes in all (a larger value, or all of them, is recorded as its size and SHA-256, marked
// truncated), and each client may make the server write ClientBytes per Window, all clients together
// TotalBytes (over streamable HTTP a client can open any number of sessions). A call that would start past
// a budget is refused before it writes anything, with a tool error that names the limit and when it resets;
// the first refusal in a window is recorded once (EventAuditRateLimited), later ones in the same window are
// not. A call already running writes its whole chain, so a budget can be exceeded by the calls in flight
// (each bounded by the line bounds of package audit).
type AuditLimits struct {
	ParamBytes  int
	ParamsBytes int
	ClientBytes int64
	TotalBytes  int64
	Window      time.Duration
}

func (l AuditLimits) withDefaults() AuditLimits {
	if l.ParamBytes == 0 {
		l.ParamBytes = DefaultAuditParamBytes
	}
	if l.ParamsBytes == 0 {
		l.ParamsBytes = DefaultAuditParamsBytes
	}
	if l.ClientBytes == 0 {
		l.ClientBytes = DefaultAuditClientBytes
	}
	if l.TotalBytes == 0 {
		l.TotalBytes = DefaultAuditTotalBytes
	}
	if l.Window <= 0 {
		l.Window = DefaultAuditWindow
	}
	return l
}

// EventAuditRateLimited records, once per window and budget, that calls are being refused because a client
// (or all clients together) wrote the window's audit budget.
const EventAuditRateLimited = "audit.rate_limited"

// KindRateLimited: the client made the server write its audit budget; calls are refused until it resets.
const KindRateLimited Kind = "rate_limited"

type clientKey struct{}

// WithClient names the client a call comes from (the MCP session), for the audit budget per client.
func WithClient(ctx context.Context, client string) context.Context {
	return context.WithValue(ctx, clientKey{}, client)
}

// ClientOf is the client named by WithClient, or "default".
func ClientOf(ctx context.Context) string {
	if c, _ := ctx.Value(clientKey{}).(string); c != "" {
		return c
	}
	return "default"
}

// allClients is the budget key of all clients together.
const allClients = "*"

// auditBudget counts the audit bytes written per client in fixed windows.
type auditBudget struct {
	mu     sync.Mutex
	start  time.Time        // the current window's start
	used   map[string]int64 // bytes per client (and allClients) in the window
	noted  map[string]bool  // budgets whose refusal was recorded in the window
	limits AuditLimits
}

// roll starts a new window when the current one has ended. The caller holds b.mu.
func (b *auditBudget) roll(now time.Time) {
	if b.used == nil || !now.Before(b.start.Add(b.limits.Window)) {
		b.start = now
		b.used = map[string]int64{}
		b.noted = map[string]bool{}
	}
}

// refusal says whether client may start a call now: nil, or which budget is used up (allClients or the
// client), until when, and whether this refusal is the window's first for it.
type refusal struct {
	key         string
	limit, used int64
	resets      time.Time
	first       bool
}

func (b *auditBudget) check(client string, now time.Time) *refusal {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.roll(now)
	for _, k := range []string{client, allClients} {
		limit := b.limits.ClientBytes
		if k == allClients {
			limit = b.limits.TotalBytes
		}
		if limit < 0 || b.used[k] < limit {
			continue
		}
		r := &refusal{key: k, limit: limit, used: b.used[k], resets: b.start.Add(b.limits.Window), first: !b.noted[k]}
		b.noted[k] = true
		return r
	}
	return nil
}

func (b *auditBudget) charge(client string, n int, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.roll(now)
	b.used[client] += int64(n)
	b.used[allClients] += int64(n)
}

// budget is the service's audit budget, made on first use.
func (s *Service) budget() *auditBudget {
	s.budgetOnce.Do(func() { s.auditBudget = &auditBudget{limits: s.AuditLimits.withDefaults()} })
	return s.auditBudget
}

// checkBudget refuses a call of client past its audit budget, recording the window's first refusal.
func (s *Service) checkBudget(client, tool string) error {
	now := s.now()
	r := s.budget().check(client, now)
	if r == nil {
		return nil
	}
	lim := s.budget().limits
	who := "this client"
	if r.key == allClients {
		who = "all clients together"
	}
	in := r.resets.Sub(now).Round(time.Second)
	msg := fmt.Sprintf("%s made the server write %d KiB of audit log in %s, the limit; calls are refused until %s (in %s)",
		who, r.limit>>10, lim.Window, r.resets.UTC().Format(time.RFC3339), in)
	if r.first {
		// Outside the budget: one line per window and budget. A failure to write it changes nothing: the
		// call is refused either way.
		_ = s.Audit.Write(audit.Event{Name: EventAuditRateLimited, Tool: tool, Fields: map[string]any{
			"client": client, "budget": map[bool]string{true: "all_clients", false: "client"}[r.key == allClients],
			"limit_bytes": r.limit, "used_bytes": r.used, "window_seconds": int64(lim.Window / time.Second),
			"resets_at": r.resets.UTC().Format(time.RFC3339), "note": "later refusals in this window are not recorded"}})
	}
	return &Error{Kind: KindRateLimited, Message: msg}
}

// auditParams is the tool.request record of the agent's arguments: each value up to ParamBytes of JSON,
// all of them up to ParamsBytes, larger ones as size and SHA-256 (audit.Summarize).
func (s *Service) auditParams(params map[string]any) any {
	lim := s.budget().limits
	out := make(map[string]any, len(params))
	for k, v := range params {
		out[k] = audit.Summarize(v, lim.ParamBytes)
	}
	return audit.Summarize(out, lim.ParamsBytes)
}
