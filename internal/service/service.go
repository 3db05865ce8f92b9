// Package service executes agent tool calls: the guardrails that mirror the webhook's policy (default
// deny, tier, namespace), the approval workflow for destructive tools, the sandbox run, and the audit chain
// of every call. It knows nothing of MCP; package mcp maps the protocol onto it.
//
// The service runs inside the untrusted MCP server. Its refusals are early and friendly; the admission
// webhook enforces the same policy whatever this package does.
package service

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	approvalstore "github.com/agent-sandbox/agent-sandbox/internal/approval/store"
	"github.com/agent-sandbox/agent-sandbox/internal/audit"
	"github.com/agent-sandbox/agent-sandbox/internal/oneline"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/scrub"
	"github.com/agent-sandbox/agent-sandbox/internal/telemetry"
)

// Runner runs one call to completion (sandbox.Runner): on a warm Pod claimed with claim when claim is set
// and one can be claimed, as job otherwise. progress receives each stage and the Job that serves the call.
type Runner interface {
	RunCall(ctx context.Context, job *batchv1.Job, claim string, progress func(sandbox.Stage, string)) (*sandbox.Result, error)
}

// WorkspaceStore publishes a workspace's files and saved plans to the sandbox namespace (as immutable,
// content-addressed ConfigMaps).
type WorkspaceStore interface {
	// EnsureWorkspace creates the workspace ConfigMap or accepts the existing one; created says which.
	EnsureWorkspace(ctx context.Context, name string, files map[string]string) (created bool, err error)
	// DeleteWorkspace deletes a workspace ConfigMap that a cancelled call created.
	DeleteWorkspace(ctx context.Context, name string) error
	EnsurePlan(ctx context.Context, planID string, plan []byte) error
	// PlanExists returns an error saying why when the saved plan is not there.
	PlanExists(ctx context.Context, planID string) error
}

// Progress receives the stages of a call; n counts from 1 to total.
type Progress func(stage string, n, total int)

// Service executes tool calls.
type Service struct {
	Policy     *policy.Compiled
	Approvals  *approvalstore.Store
	Audit      *audit.Log
	Runner     Runner
	Workspaces WorkspaceStore
	// WorkspaceDir holds one folder of Terraform files per workspace.
	WorkspaceDir string
	// Warm lets calls of tools with a warm pool claim a warm Pod (docs/design/warm-pool.md).
	Warm bool
	// Instance names this server process in every tool.request, so that a server started after it was
	// killed can tell its abandoned calls from a live neighbour's (Recover).
	Instance string
	// OnAuditError is told when audit events of a call that had begun could not be written (the disk
	// filled during the call): the call has run, so its result still goes to the agent, and the operator
	// must hear of the gap. The MCP server logs it as an error.
	OnAuditError func(requestID string, err error)
	// Tracer traces every call from its request to its result (nil: no tracing); the trace's ID is derived
	// from the request ID (telemetry.TraceIDFor).
	Tracer *telemetry.Tracer
	// AuditLimits bound the audit bytes of one call's arguments and of each client per window (zero:
	// the defaults).
	AuditLimits AuditLimits
	Now         func() time.Time

	budgetOnce  sync.Once
	auditBudget *auditBudget
	// wsUsers counts the calls of this server that use each workspace ConfigMap now.
	wsMu    sync.Mutex
	wsUsers map[string]int
}

// Kind classifies a refused or failed call.
type Kind string

// The kinds of call errors.
const (
	KindDenied   Kind = "denied"   // the policy refuses the call
	KindInvalid  Kind = "invalid"  // the parameters are wrong
	KindFailed   Kind = "failed"   // the sandbox ran and the tool failed, or the sandbox could not run
	KindApproval Kind = "approval" // the approval was denied, expired or already used
	// KindApprovalRequired: a human must approve this exact call first (the message names the command).
	KindApprovalRequired Kind = "approval_required"
)

// Error is a call that did not produce a result: a domain failure, reported to the agent as a tool error
// with one line of reason, never a protocol error.
type Error struct {
	Kind      Kind
	RequestID string
	Message   string
	Err       error
}

func (e *Error) Error() string { return e.Message }

// Unwrap exposes the cause for errors.Is.
func (e *Error) Unwrap() error { return e.Err }

// call is one tool call in progress: its correlation ID and audit trail.
type call struct {
	s      *Service
	id     string
	tool   string
	client string // the MCP client the call came from, for its audit budget
	// ws is the call's workspace, published once the call holds its concurrency slot (nil: none).
	ws       *workspace
	progress Progress
	// auditErr collects audit writes that failed after the call began.
	auditErr error
	// trace is the call's trace (nil when tracing is off); outcome, when set, is the outcome it ends with
	// although the call returned no error (approval_required).
	trace   *telemetry.Call
	outcome string
	// grant is the approval request whose grants the call consumed (empty: none); they are given back when
	// the call ends with its Job never sent (giveBack).
	grant string
	// createFailed is the Job whose create failed when the call's run did (sandbox.FailedCreate): the webhook
	// may have anchored it, so the call's tool.result names it (audit.FieldJobsCreateFailed).
	createFailed string
}

func (s *Service) begin(ctx context.Context, tool string, params map[string]any, progress Progress) (*call, error) {
	client := ClientOf(ctx)
	if err := s.checkBudget(client, tool); err != nil {
		return nil, err
	}
	id, err := approval.NewRequestID()
	if err != nil {
		return nil, err
	}
	if progress == nil {
		progress = func(string, int, int) {}
	}
	c := &call{s: s, id: id, tool: tool, client: client, progress: progress}
	// Without an audit record there is no call: refuse rather than run unrecorded, and refuse up front when
	// the whole chain would not fit.
	if err := s.Audit.CheckSpace(audit.CallReserve); err != nil {
		return nil, &Error{Kind: KindFailed, RequestID: id, Message: "the audit log cannot be written, so no call is made: " + oneline.Fold(err.Error()), Err: err}
	}
	fields := map[string]any{"params": s.auditParams(params)}
	if s.Instance != "" {
		fields[FieldServer] = s.Instance
	}
	n, err := s.Audit.WriteSize(audit.Event{RequestID: id, Name: audit.EventToolRequest, Tool: tool, Fields: fields})
	if err != nil {
		return nil, &Error{Kind: KindFailed, RequestID: id, Message: "the audit log cannot be written, so no call is made: " + oneline.Fold(err.Error()), Err: err}
	}
	s.budget().charge(client, n, s.now())
	return c, nil
}

func (c *call) audit(event string, fields map[string]any) {
	// A failed write after the call began must not pass silently, nor turn a finished sandbox run into a
	// false failure: it is kept and reported through Service.OnAuditError when the call ends.
	n, err := c.s.Audit.WriteSize(audit.Event{RequestID: c.id, Name: event, Tool: c.tool, Fields: fields})
	if err != nil {
		c.auditErr = errors.Join(c.auditErr, err)
	}
	c.s.budget().charge(c.client, n, c.s.now())
}

// fail ends the call with a domain error and records it.
func (c *call) fail(kind Kind, err error) error {
	err = c.giveBack(err)
	msg := oneline.Fold(scrub.String(err.Error()))
	if kind == KindDenied || kind == KindInvalid {
		c.audit(audit.EventGuardrailDecision, map[string]any{"decision": "deny", "reason": msg})
	}
	fields := map[string]any{"is_error": true, "kind": string(kind), "reason": msg}
	if c.createFailed != "" {
		fields[audit.FieldJobsCreateFailed] = []string{c.createFailed}
	}
	c.audit(audit.EventToolResult, fields)
	return &Error{Kind: kind, RequestID: c.id, Message: msg, Err: err}
}

// giveBack returns the call's consumed grants to the store when err says its Job was never sent to the
// cluster (sandbox.ErrNotSent) or was refused before the approval check (sandbox.ErrRefusedBeforeCheck, as
// when the webhook is down): no webhook recorded their tokens, so the human's decision is not lost to a call
// cancelled in the queue, a cluster out of reach or a webhook being restarted, and the same call, made
// again, runs with them. The chain records it (approval.returned) before the call's tool.result.
func (c *call) giveBack(err error) error {
	if c.grant == "" || !sandbox.ApprovalsUnused(err) || c.s.Approvals == nil {
		return err
	}
	id := c.grant
	c.grant = ""
	if gerr := c.s.Approvals.GiveBack(context.Background(), id); gerr != nil {
		c.audit(audit.EventApprovalReturned, map[string]any{"approval_request": id, "returned": false, "reason": oneline.Fold(gerr.Error())})
		return err
	}
	c.audit(audit.EventApprovalReturned, map[string]any{"approval_request": id, "returned": true})
	c.trace.Event(telemetry.Event{Name: audit.EventApprovalReturned, Time: time.Now(), Attrs: map[string]any{"approval_request": id}})
	return fmt.Errorf("%w; approval %s was not used and stays granted: make the same call again", err, id)
}

// invoke applies the guardrails: the tool exists (default deny) and the parameters and namespace are ones
// the policy allows. The scope and namespace come from the policy.
func (c *call) invoke(params map[string]any) (*policy.Invocation, error) {
	t, err := c.s.Policy.Tool(c.tool)
	if err != nil {
		return nil, c.fail(KindDenied, fmt.Errorf("tool %s is not allowed by the policy", c.tool))
	}
	inv, err := t.Invoke(params)
	switch {
	case errors.Is(err, policy.ErrNamespaceDenied):
		return nil, c.fail(KindDenied, fmt.Errorf("refused by policy: %w", err))
	case err != nil:
		return nil, c.fail(KindInvalid, err)
	}
	return inv, nil
}

// run renders and runs the sandbox Job, writing the sandbox and credential events of the audit chain.
func (c *call) run(ctx context.Context, inv *policy.Invocation, tokens []string) (*sandbox.Result, error) {
	// The audit chain's head, read after this call's tool.request and decision were written, travels with
	// the Job (and the claim): the webhook admits the call only with it and records it, with the request
	// ID, outside this host, so that `audit verify --against-cluster` finds this log cut short or rewritten.
	head, err := c.s.Audit.Head()
	if err != nil {
		return nil, c.fail(KindFailed, fmt.Errorf("%w: the audit log cannot be read, so the call cannot be anchored: %w", sandbox.ErrNotSent, err))
	}
	job, err := sandbox.RenderJob(c.s.Policy, sandbox.JobSpec{Invocation: inv, RequestID: c.id, ApprovalTokens: tokens, AuditHead: head})
	if err != nil {
		return nil, c.fail(KindFailed, fmt.Errorf("%w: %w", sandbox.ErrNotSent, err))
	}
	claim := ""
	if c.s.Warm && inv.Tool.WarmPool != nil {
		if claim, err = sandbox.RenderClaim(inv, c.id, tokens, head); err != nil {
			return nil, c.fail(KindFailed, fmt.Errorf("%w: %w", sandbox.ErrNotSent, err))
		}
		// A claim the webhook admitted can still fail at storage with a Conflict (the API server's write lost a
		// race, and its retry fails the claim's resourceVersion), its tokens recorded, and the call go on to
		// another Pod or cold: such a call's approvals are never given back.
		c.grant = ""
	}
	if c.ws != nil {
		ctx = sandbox.WithBeforeCreate(ctx, func(ctx context.Context) error { return c.s.publish(ctx, c.ws) })
	}
	res, err := c.runOnce(ctx, inv, job, claim)
	if claim != "" && err == nil && res != nil && res.Warm && inv.Tool.Tier == policy.TierRead && unreachableAPI(res) {
		// A read tool on a warm Pod that could not reach the API server had no effect: run it once more, cold,
		// in a new Pod (on the local cluster a Pod's connections to the API server are, rarely, never answered).
		c.audit(EventSandboxRetried, map[string]any{"job": res.JobName, "reason": "the warm Pod's tool could not reach the API server; running once more as a cold Job"})
		c.trace.Event(telemetry.Event{Name: EventSandboxRetried, Time: time.Now(), Attrs: map[string]any{"job": res.JobName}})
		res, err = c.runOnce(ctx, inv, job, "")
	}
	// A cancelled call, or one that failed before its Job existed, leaves no workspace it created behind.
	c.releaseWorkspace(c.ws, err != nil && (res == nil || errors.Is(err, context.Canceled)))
	if err != nil {
		c.createFailed, _ = sandbox.FailedCreate(err)
		if errors.Is(err, context.Canceled) {
			if errors.Is(err, sandbox.ErrNotSent) {
				return nil, c.fail(KindFailed, fmt.Errorf("the call was cancelled before its sandbox Job was created (%w)", sandbox.ErrNotSent))
			}
			return nil, c.fail(KindFailed, errors.New("the call was cancelled; its sandbox Job was deleted"))
		}
		kind := KindFailed
		if errors.Is(err, sandbox.ErrDenied) || errors.Is(err, sandbox.ErrInputRefused) {
			kind = KindDenied
		}
		return nil, c.fail(kind, err)
	}
	return res, nil
}

// EventSandboxRetried records that a call's sandbox run is repeated (a read tool that could not reach the
// API server from a warm Pod).
const EventSandboxRetried = "sandbox.retried"

// unreachableAPI reports whether a run's tool failed to connect to the API server.
func unreachableAPI(res *sandbox.Result) bool {
	e := res.ResultError
	return strings.Contains(e, "dial tcp") && (strings.Contains(e, "i/o timeout") || strings.Contains(e, "connect: connection refused"))
}

// runOnce runs the call's sandbox once (warm when claim is set and a warm Pod is claimed) and writes its
// sandbox and credential events into the audit chain.
func (c *call) runOnce(ctx context.Context, inv *policy.Invocation, job *batchv1.Job, claim string) (*sandbox.Result, error) {
	total := len(sandbox.Stages)
	start := time.Now()
	res, err := c.s.Runner.RunCall(ctx, job, claim, func(st sandbox.Stage, jobName string) {
		for i, s := range sandbox.Stages {
			if s == st {
				c.progress(string(st), i+1, total)
			}
		}
		if st == sandbox.StageAdmitted {
			c.audit(audit.EventSandboxStarted, map[string]any{"job": jobName, "namespace": job.Namespace, "warm": jobName != job.Name,
				"scope": inv.Scope, "target_namespace": inv.TargetNamespace, "runtime_class": c.s.Policy.Spec.Sandbox.RuntimeClassName})
		}
	})
	if res != nil {
		c.credentialEvents(res, audit.EventCredentialIssued)
		c.audit(audit.EventSandboxCompleted, map[string]any{"job": res.JobName, "warm": res.Warm, "exit_code": res.ExitCode, "ok": err == nil && res.ExitCode == 0,
			"timings_ms": timingsMS(res.Timings)})
		c.credentialEvents(res, audit.EventCredentialRevoked)
		c.unrevoked(res.CredentialEvents)
		c.tracePhases(res, start)
	}
	return res, err
}

// credentialEvents copies the credential agent's events of one kind into the audit chain.
func (c *call) credentialEvents(res *sandbox.Result, name string) {
	for _, ev := range res.CredentialEvents {
		if ev["event"] != name {
			continue
		}
		fields := map[string]any{}
		for k, v := range ev {
			if k != "event" {
				fields[k] = v
			}
		}
		c.audit(name, fields)
	}
}

// eventRevokeFailed is the credential agent's event for a revocation Vault refused (broker.EventRevokeFailed).
const eventRevokeFailed = "credential.revoke_failed"

// unrevoked closes the audit record of every credential issued without a reported revocation (a call
// cancelled or killed before the agent reported it, or a revocation Vault refused) with a credential.revoked
// whose status is "unknown" or "failed", naming the lease and when it ends at the latest (its issue time
// plus its TTL), so that the audit says when the credential is gone.
func (c *call) unrevoked(events []map[string]any) {
	for _, f := range unrevokedFields(events, time.Now()) {
		c.audit(audit.EventCredentialRevoked, f)
	}
}

// unrevokedFields are the credential.revoked fields unrevoked writes for events.
func unrevokedFields(events []map[string]any, now time.Time) []map[string]any {
	revoked, failed := map[string]bool{}, map[string]map[string]any{}
	for _, ev := range events {
		id, _ := ev["lease_id"].(string)
		switch ev["event"] {
		case audit.EventCredentialRevoked:
			revoked[id] = true
		case eventRevokeFailed:
			failed[id] = ev
		}
	}
	var out []map[string]any
	for _, ev := range events {
		id, _ := ev["lease_id"].(string)
		if ev["event"] != audit.EventCredentialIssued || revoked[id] {
			continue
		}
		issued := now
		if t, err := time.Parse(time.RFC3339Nano, fmt.Sprint(ev["time"])); err == nil {
			issued = t
		}
		ttl, _ := ev["ttl_seconds"].(float64)
		if ttl <= 0 {
			ttl = 600 // Vault's lease for a per-action credential (README invariant 6)
		}
		f := map[string]any{"lease_id": id, "status": "unknown", "service_account": ev["service_account"],
			"lease_ends_by": issued.Add(time.Duration(ttl) * time.Second).UTC().Format(time.RFC3339),
			"reason":        "the call ended before the credential agent reported a revocation; the Job was deleted (SIGTERM makes the agent revoke) and the lease ends with its TTL at the latest"}
		if fe, ok := failed[id]; ok {
			f["status"], f["reason"] = "failed", "Vault refused the revocation; the lease ends with its TTL"
			f["error"] = fe["error"]
		}
		out = append(out, f)
	}
	return out
}

func timingsMS(t sandbox.Timings) map[string]int64 {
	return map[string]int64{"admission": t.Admission.Milliseconds(), "pod_start": t.PodStart.Milliseconds(),
		"mint": t.Credentials.Milliseconds(), "run": t.Run.Milliseconds(), "cleanup": t.Cleanup.Milliseconds(), "total": t.Total.Milliseconds()}
}

func (s *Service) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}
