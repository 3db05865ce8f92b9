package service

import (
	"errors"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/audit"
	"github.com/agent-sandbox/agent-sandbox/internal/oneline"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/scrub"
	"github.com/agent-sandbox/agent-sandbox/internal/telemetry"
)

// OutcomeOK is the trace outcome of a call that returned its result; the others are the Kinds.
const OutcomeOK = "ok"

// endTrace ends the call's trace with the call's outcome. Failure messages are the call's one-line,
// scrubbed reason, as the agent sees it.
func (c *call) endTrace(err error) {
	if c.trace == nil {
		return
	}
	outcome, failure := OutcomeOK, ""
	var ce *Error
	switch {
	case err == nil && c.outcome != "":
		outcome = c.outcome
	case errors.As(err, &ce):
		outcome = string(ce.Kind)
		if ce.Kind != KindApprovalRequired {
			failure = ce.Message
		}
	case err != nil:
		outcome, failure = "error", oneline.Fold(scrub.String(err.Error()))
	}
	c.trace.End(outcome, failure, time.Now())
}

// tracePhases records one sandbox run's phases as child spans of the call, rebuilt from the runner's
// timings: the run started at start, and its phases followed one another in this order. The credential
// span runs from issue to revoke by the credential agent's own clock when its events carry their times,
// and its events carry the scope and the service account's name: never a token (only those fields are
// copied).
func (c *call) tracePhases(res *sandbox.Result, start time.Time) {
	if c.trace == nil {
		return
	}
	t := res.Timings
	c.trace.Set(map[string]any{"job": res.JobName, "warm": res.Warm, "exit_code": res.ExitCode})
	next := start.Add(t.Admission)
	c.trace.Phase("admission", start, next, nil)
	if !res.Warm && t.PodStart > 0 {
		c.trace.Phase("pod_start", next, next.Add(t.PodStart), nil)
		next = next.Add(t.PodStart)
	}
	runStart := next.Add(t.Credentials)
	runEnd := runStart.Add(t.Run)
	credStart, credEnd := next, runEnd
	var events []telemetry.Event
	for _, ev := range res.CredentialEvents {
		name, _ := ev["event"].(string)
		if name != audit.EventCredentialIssued && name != audit.EventCredentialRevoked {
			continue
		}
		when, ok := eventTime(ev)
		switch {
		case !ok && name == audit.EventCredentialIssued:
			when = runStart
		case !ok:
			when = runEnd
		case name == audit.EventCredentialIssued:
			credStart = when
		default:
			credEnd = when
		}
		events = append(events, telemetry.Event{Name: name, Time: when, Attrs: credentialAttrs(ev)})
	}
	if len(events) > 0 || t.Credentials > 0 {
		c.trace.Phase("credential", credStart, credEnd, nil, events...)
	}
	// A tool that ran has a run span, even one too short to be seen between two reads of its Pod (the
	// kubelet's times are whole seconds).
	if t.Run > 0 || res.ExitCode >= 0 {
		c.trace.Phase("run", runStart, runEnd, nil)
	}
	end := start.Add(t.Total)
	if t.Total == 0 {
		end = time.Now()
	}
	c.trace.Phase("cleanup", end.Add(-t.Cleanup), end, nil)
}

// credentialTraceFields are the fields of the credential agent's events that a trace carries: none of
// them is a secret.
var credentialTraceFields = []string{"scope", "service_account", "ttl_seconds"}

func credentialAttrs(ev map[string]any) map[string]any {
	out := map[string]any{}
	for _, k := range credentialTraceFields {
		if v, ok := ev[k]; ok {
			out[k] = v
		}
	}
	return out
}

// eventTime is the time an agent event says it happened.
func eventTime(ev map[string]any) (time.Time, bool) {
	s, _ := ev["time"].(string)
	t, err := time.Parse(time.RFC3339Nano, s)
	return t, err == nil
}
