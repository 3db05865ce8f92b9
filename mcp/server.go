// Package mcp is agent-sandbox's MCP server: the only package that imports the MCP SDK. It offers the
// policy's tools plus approval_status, sends progress notifications for long calls, and speaks stdio (the
// default; nothing but protocol is ever written to stdout) or streamable HTTP (HTTPHandler: stateless by
// default, so that replicas behind one address serve any request of any client; a bearer token always, the
// Origin header checked, /healthz and Prometheus /metrics beside the MCP endpoint).
//
// Domain failures -- a refusal by the policy, a failed sandbox, an unusable approval -- are tool results
// with isError and a one-line reason, so the agent can read them and correct course; protocol errors are
// reserved for malformed requests. No tool approves anything: approvals are made by a person with
// `agent-sandbox approve` in a terminal.
package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/service"
)

// Service is what the MCP tools call (service.Service): the policy's tools, all through one call path, and
// the read-only approval_status.
type Service interface {
	Tools() ([]service.ToolInfo, error)
	Call(ctx context.Context, tool string, args map[string]any, p service.Progress) (any, error)
	ApprovalStatus(ctx context.Context, in service.ApprovalStatusInput) (*service.ApprovalStatusOutput, error)
}

var _ Service = (*service.Service)(nil)

// Instructions tell the agent how the server works; clients show them to the model.
const Instructions = `agent-sandbox runs each tool call in a throwaway gVisor sandbox on Kubernetes with a short-lived,
narrowly scoped credential. The tools and what each may touch come from the policy. Read-only tools run
immediately. A tool that needs approval (terraform_apply applies only a saved plan from terraform_plan) runs
only after a human approves that exact call in a terminal: when it returns approval_required, show the user
the approval request and the command, wait for them, then call the tool again with the same arguments. You
cannot approve anything yourself.`

// NewServer builds the MCP server over svc: one tool per policy tool, as the service's catalogue describes
// it (schemas, title, annotations), each served by the same handler, plus approval_status.
func NewServer(svc Service, version string, log *slog.Logger) (*sdk.Server, error) {
	s := sdk.NewServer(&sdk.Implementation{Name: "agent-sandbox", Title: "agent-sandbox", Version: version},
		&sdk.ServerOptions{Instructions: Instructions, Logger: log, Capabilities: &sdk.ServerCapabilities{}})
	tools, err := svc.Tools()
	if err != nil {
		return nil, err
	}
	for _, t := range tools {
		s.AddTool(&sdk.Tool{Name: t.Name, Title: t.Title, Description: t.Description, InputSchema: t.InputSchema,
			OutputSchema: t.OutputSchema, Annotations: annotations(t)}, callHandler(svc, t.Name))
	}
	f := false
	sdk.AddTool(s, &sdk.Tool{
		Name: service.ToolApprovalStatus, Title: "Approval status",
		Description: "Read the state of an approval request (pending, granted, denied, consumed, expired). Read-only: it cannot approve.",
		Annotations: &sdk.ToolAnnotations{Title: "Approval status", ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: &f},
	}, func(ctx context.Context, req *sdk.CallToolRequest, in service.ApprovalStatusInput) (*sdk.CallToolResult, service.ApprovalStatusOutput, error) {
		out, err := svc.ApprovalStatus(service.WithClient(ctx, clientID(req)), in)
		if err != nil {
			return nil, service.ApprovalStatusOutput{}, errors.New(errorText(err))
		}
		return nil, *out, nil
	})
	known := map[string]bool{service.ToolApprovalStatus: true}
	for _, t := range tools {
		known[t.Name] = true
	}
	s.AddReceivingMiddleware(auditUnknownTools(svc, known))
	return s, nil
}

// auditUnknownTools records a call of a tool the server does not offer before the SDK refuses it (a protocol
// error, as MCP asks): the service's one call path audits it as refused by the policy and charges the
// client's budget, so an agent trying kubectl_exec or approve, once or a thousand times, is on record.
func auditUnknownTools(svc Service, known map[string]bool) sdk.Middleware {
	return func(next sdk.MethodHandler) sdk.MethodHandler {
		return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
			if call, ok := req.(*sdk.CallToolRequest); ok && method == "tools/call" && call.Params != nil && !known[call.Params.Name] {
				var args map[string]any
				_ = json.Unmarshal(call.Params.Arguments, &args) // not an object: the call is recorded without them
				_, _ = svc.Call(service.WithClient(ctx, clientID(call)), call.Params.Name, args, nil)
			}
			return next(ctx, method, req)
		}
	}
}

// annotations are the policy's hints in MCP's words.
func annotations(t service.ToolInfo) *sdk.ToolAnnotations {
	destructive, openWorld := policy.Is(t.Hints.Destructive), policy.Is(t.Hints.OpenWorld)
	return &sdk.ToolAnnotations{Title: t.Title, ReadOnlyHint: policy.Is(t.Hints.ReadOnly), DestructiveHint: &destructive,
		IdempotentHint: policy.Is(t.Hints.Idempotent), OpenWorldHint: &openWorld}
}

// callHandler serves every policy tool: the arguments go to the service as they came (it checks them against
// the policy); the structured result goes back as structured content and, for clients that read only
// text, as its JSON. A domain failure is a tool result with isError and one line of reason.
func callHandler(svc Service, name string) sdk.ToolHandler {
	return func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		args := map[string]any{}
		if raw := req.Params.Arguments; len(raw) > 0 && string(raw) != "null" {
			if err := json.Unmarshal(raw, &args); err != nil {
				return toolError("invalid: the arguments are not a JSON object"), nil
			}
		}
		out, err := svc.Call(service.WithClient(ctx, clientID(req)), name, args, progress(ctx, req))
		if err != nil {
			return toolError(errorText(err)), nil
		}
		data, err := json.Marshal(out)
		if err != nil {
			return nil, fmt.Errorf("encode the result of %s: %w", name, err)
		}
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: string(data)}}, StructuredContent: json.RawMessage(data)}, nil
	}
}

// clientID names the client of a call for the audit budget per client: "stdio" for the one stdio client;
// over streamable HTTP "http:" and the session ID when the server is stateful, and "http" when it is
// stateless. A stateless server has no session to tell clients apart by, and nothing a client says of
// itself (its clientInfo) can be trusted to: every holder of the bearer token is one client, bounded
// together. (A session never bounded a client either: it could open a new one for a fresh budget.)
func clientID(req *sdk.CallToolRequest) string {
	if req.Extra == nil || req.Extra.Header == nil {
		return "stdio"
	}
	if req.Session != nil && req.Session.ID() != "" {
		return "http:" + req.Session.ID()
	}
	return "http"
}

func toolError(text string) *sdk.CallToolResult {
	return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: text}}}
}

// errorText is a domain error's one line for the agent, naming the request ID so the user can find the
// call in the audit log.
func errorText(err error) string {
	var se *service.Error
	switch {
	case errors.As(err, &se) && se.RequestID != "":
		return fmt.Sprintf("%s: %s (request %s)", se.Kind, se.Message, se.RequestID)
	case errors.As(err, &se):
		return fmt.Sprintf("%s: %s", se.Kind, se.Message)
	}
	return err.Error()
}

// progress returns a reporter that sends MCP progress notifications when the client asked for them.
func progress(ctx context.Context, req *sdk.CallToolRequest) service.Progress {
	token := req.Params.GetProgressToken()
	if token == nil {
		return nil
	}
	return func(stage string, n, total int) {
		// A notification that cannot be delivered must not fail the call.
		_ = req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: token, Message: stage, Progress: float64(n), Total: float64(total)})
	}
}
