// Package mcp is agent-sandbox's MCP server: the only package that imports the MCP SDK. It offers the
// policy's tools plus approval_status, sends progress notifications for long calls, and speaks stdio (the
// default; nothing but protocol is ever written to stdout) or streamable HTTP (HTTPHandler: a bearer token
// always, the Origin header checked, /healthz and Prometheus /metrics beside the MCP endpoint).
//
// Domain failures -- a refusal by the policy, a failed sandbox, an unusable approval -- are tool results
// with isError and a one-line reason, so the agent can read them and correct course; protocol errors are
// reserved for malformed requests. No tool approves anything: approvals are made by a person with
// `agent-sandbox approve` in a terminal.
package mcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/service"
)

// Service is what the MCP tools call (service.Service).
type Service interface {
	PodStatus(ctx context.Context, in service.PodStatusInput, p service.Progress) (*service.PodStatusOutput, error)
	Plan(ctx context.Context, in service.PlanInput, p service.Progress) (*service.PlanOutput, error)
	Apply(ctx context.Context, in service.ApplyInput, p service.Progress) (*service.ApplyOutput, error)
	ApprovalStatus(ctx context.Context, in service.ApprovalStatusInput) (*service.ApprovalStatusOutput, error)
}

var _ Service = (*service.Service)(nil)

// Instructions tell the agent how the server works; clients show them to the model.
const Instructions = `agent-sandbox runs each tool call in a throwaway gVisor sandbox on Kubernetes with a short-lived,
narrowly scoped credential. Read-only tools run immediately. terraform_apply applies only a saved plan from
terraform_plan and only after a human approves that exact plan in a terminal: when it returns
approval_required, show the user the approval request and the command, wait for them, then call
terraform_apply again with the same arguments. You cannot approve anything yourself.`

// NewServer builds the MCP server over svc. Tool descriptions come from the policy.
func NewServer(svc Service, p *policy.Compiled, version string, log *slog.Logger) *sdk.Server {
	s := sdk.NewServer(&sdk.Implementation{Name: "agent-sandbox", Title: "agent-sandbox", Version: version},
		&sdk.ServerOptions{Instructions: Instructions, Logger: log, Capabilities: &sdk.ServerCapabilities{}})
	describe := func(name, fallback string) string {
		if t, err := p.Tool(name); err == nil {
			return t.Description
		}
		return fallback
	}
	f := false
	if _, err := p.Tool(service.ToolPodStatus); err == nil {
		sdk.AddTool(s, &sdk.Tool{
			Name: service.ToolPodStatus, Title: "Kubernetes pod status",
			Description: describe(service.ToolPodStatus, ""),
			Annotations: &sdk.ToolAnnotations{Title: "Kubernetes pod status", ReadOnlyHint: true, OpenWorldHint: &f},
		}, func(ctx context.Context, req *sdk.CallToolRequest, in service.PodStatusInput) (*sdk.CallToolResult, service.PodStatusOutput, error) {
			out, err := svc.PodStatus(ctx, in, progress(ctx, req))
			return result(out, err)
		})
	}
	if _, err := p.Tool(service.ToolPlan); err == nil {
		sdk.AddTool(s, &sdk.Tool{
			Name: service.ToolPlan, Title: "Terraform plan",
			Description: describe(service.ToolPlan, ""),
			// It saves a plan and takes Terraform's state lock, but changes no managed infrastructure.
			Annotations: &sdk.ToolAnnotations{Title: "Terraform plan", ReadOnlyHint: true, OpenWorldHint: &f},
		}, func(ctx context.Context, req *sdk.CallToolRequest, in service.PlanInput) (*sdk.CallToolResult, service.PlanOutput, error) {
			out, err := svc.Plan(ctx, in, progress(ctx, req))
			return result(out, err)
		})
	}
	if _, err := p.Tool(service.ToolApply); err == nil {
		t := true
		sdk.AddTool(s, &sdk.Tool{
			Name: service.ToolApply, Title: "Terraform apply (needs human approval)",
			Description: describe(service.ToolApply, ""),
			Annotations: &sdk.ToolAnnotations{Title: "Terraform apply (needs human approval)", DestructiveHint: &t, OpenWorldHint: &f},
		}, func(ctx context.Context, req *sdk.CallToolRequest, in service.ApplyInput) (*sdk.CallToolResult, service.ApplyOutput, error) {
			out, err := svc.Apply(ctx, in, progress(ctx, req))
			return result(out, err)
		})
	}
	sdk.AddTool(s, &sdk.Tool{
		Name: service.ToolApprovalStatus, Title: "Approval status",
		Description: "Read the state of an approval request (pending, granted, denied, consumed, expired). Read-only: it cannot approve.",
		Annotations: &sdk.ToolAnnotations{Title: "Approval status", ReadOnlyHint: true, OpenWorldHint: &f},
	}, func(ctx context.Context, _ *sdk.CallToolRequest, in service.ApprovalStatusInput) (*sdk.CallToolResult, service.ApprovalStatusOutput, error) {
		out, err := svc.ApprovalStatus(ctx, in)
		return result(out, err)
	})
	return s
}

// result turns the service's answer into the SDK's: a domain error becomes a tool error result whose text
// names the request ID, so the user can find it in the audit log.
func result[T any](out *T, err error) (*sdk.CallToolResult, T, error) {
	var zero T
	if err != nil {
		var se *service.Error
		if errors.As(err, &se) && se.RequestID != "" {
			return nil, zero, fmt.Errorf("%s: %s (request %s)", se.Kind, se.Message, se.RequestID)
		}
		if errors.As(err, &se) {
			return nil, zero, fmt.Errorf("%s: %s", se.Kind, se.Message)
		}
		return nil, zero, err
	}
	return nil, *out, nil
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

// RunStdio serves one client over stdin/stdout until it disconnects or ctx ends.
func RunStdio(ctx context.Context, s *sdk.Server) error {
	return s.Run(ctx, &sdk.StdioTransport{})
}
