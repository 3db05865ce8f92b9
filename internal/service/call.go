package service

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/audit"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
)

// ToolApprovalStatus is the one tool the service offers that is not in the policy: it reads the approvals
// database and runs nothing.
const ToolApprovalStatus = "approval_status"

// ToolInfo is what the agent is told about one policy tool, all of it derived from the policy.
type ToolInfo struct {
	Name        string
	Title       string
	Description string
	// InputSchema holds every parameter the agent gives, with the policy's patterns, limits and enums
	// (the tool's namespaces, the workspace folders found); the server-filled ones are left out.
	InputSchema map[string]any
	// OutputSchema is the structured result's schema, request_id included.
	OutputSchema map[string]any
	Hints        policy.Hints
}

// Tools lists the policy's tools, in policy order, as the agent sees them.
func (s *Service) Tools() ([]ToolInfo, error) {
	workspaces := s.workspaceFolders()
	out := make([]ToolInfo, 0, len(s.Policy.Spec.Tools))
	for i := range s.Policy.Spec.Tools {
		t := &s.Policy.Spec.Tools[i]
		kind, ok := resultKinds[t.Result.Kind]
		if !ok {
			return nil, fmt.Errorf("tool %s: result kind %q is unknown to this server", t.Name, t.Result.Kind)
		}
		sch, err := kind.outputSchema(t)
		if err != nil {
			return nil, fmt.Errorf("tool %s: output schema: %w", t.Name, err)
		}
		out = append(out, ToolInfo{Name: t.Name, Title: t.Title, Description: t.Description, InputSchema: t.InputSchema(workspaces),
			OutputSchema: sch.Map(), Hints: t.Hints})
	}
	return out, nil
}

// workspaceFolders are the workspace folders the server could publish, for the input schema's enum.
func (s *Service) workspaceFolders() []string {
	if s.WorkspaceDir == "" {
		return nil
	}
	entries, err := os.ReadDir(s.WorkspaceDir)
	if err != nil {
		return nil // no enum: the call itself says what is wrong
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	return names
}

// Call runs one policy tool for the agent: the one path every tool takes. The agent's arguments are checked
// against the policy before anything is published to the cluster; the server fills its own parameters (the
// workspace ConfigMap), a tool that needs a human's approval takes a granted one or files the request, the
// Job runs in a sandbox, and the tool's result kind decodes, checks and summarises what it returned. The
// output is the structured result (it always carries the call's request_id).
func (s *Service) Call(ctx context.Context, tool string, args map[string]any, progress Progress) (out any, err error) {
	start := time.Now()
	c, err := s.begin(ctx, tool, args, progress)
	if err != nil {
		return nil, err
	}
	c.trace = s.Tracer.StartCall(ctx, c.id, tool, start)
	defer func() {
		c.endTrace(err)
		if c.auditErr != nil && s.OnAuditError != nil {
			s.OnAuditError(c.id, c.auditErr)
		}
	}()
	t, err := s.Policy.Tool(tool)
	if err != nil {
		return nil, c.fail(KindDenied, fmt.Errorf("tool %s is not allowed by the policy", tool))
	}
	kind, ok := resultKinds[t.Result.Kind]
	if !ok {
		return nil, c.fail(KindFailed, fmt.Errorf("tool %s: result kind %q is unknown to this server", tool, t.Result.Kind))
	}
	params, err := t.CheckAgentParams(args)
	if err != nil {
		return nil, c.failParams(err)
	}
	if w := t.Workspace; w != nil && w.From != "" {
		// Read and checked now (a refused workspace fails fast); published only when the Job is about to be
		// created, once the call holds its concurrency slot.
		folder, _ := params[w.From].(string)
		ws, err := s.readWorkspace(folder)
		if err != nil {
			return nil, c.fail(KindInvalid, err)
		}
		c.ws = ws
		params[w.Parameter] = ws.name
	}
	inv, err := c.invoke(params)
	if err != nil {
		return nil, err
	}
	c.trace.Set(map[string]any{"namespace": inv.TargetNamespace, "tier": string(t.Tier), "scope": inv.Scope})
	// A saved plan must exist before a human is asked about it or a Job waits for it.
	if t.Plan != nil {
		id, _ := inv.Params[t.Plan.Parameter].(string)
		if err := s.Workspaces.PlanExists(ctx, id); err != nil {
			return nil, c.fail(clusterOr(err, KindInvalid), err)
		}
	}
	run := &runInfo{tool: t, inv: inv}
	if t.RequiresApproval {
		hash, err := approval.ParamsHash(inv.Tool.Name, inv.Params)
		if err != nil {
			return nil, c.fail(KindInvalid, err)
		}
		tokens, req, err := s.takeGrant(ctx, c, inv, hash)
		if err != nil {
			return nil, err
		}
		if len(tokens) == 0 {
			return s.requestApproval(ctx, c, inv, hash, kind)
		}
		run.tokens, run.approval = tokens, req
		c.grant = req.ID
	} else {
		c.audit(audit.EventGuardrailDecision, map[string]any{"decision": "allow", "tier": string(t.Tier), "scope": inv.Scope, "target_namespace": inv.TargetNamespace})
	}
	res, err := c.run(ctx, inv, run.tokens)
	if err != nil {
		return nil, err
	}
	out, fields, err := kind.decode(ctx, s, c, run, res)
	if err != nil {
		return nil, err
	}
	fields["is_error"] = false
	c.audit(audit.EventToolResult, fields)
	return out, nil
}

// runInfo is what a result kind knows of the call it decodes.
type runInfo struct {
	tool     *policy.Tool
	inv      *policy.Invocation
	tokens   []string // the approvals the Job carries, one per approver
	approval *approval.Request
}

// failParams classifies a refusal of the agent's arguments: a namespace outside the tool's list is the
// policy's denial, anything else invalid arguments.
func (c *call) failParams(err error) error {
	if errors.Is(err, policy.ErrNamespaceDenied) {
		return c.fail(KindDenied, fmt.Errorf("refused by policy: %w", err))
	}
	return c.fail(KindInvalid, err)
}

// clusterOr is KindFailed for an error that says the cluster could not be reached, else kind: an
// unreachable cluster is a failure, never the caller's mistake.
func clusterOr(err error, kind Kind) Kind {
	if errors.Is(err, sandbox.ErrClusterDown) {
		return KindFailed
	}
	return kind
}
