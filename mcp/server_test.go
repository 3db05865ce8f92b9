package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	approvalstore "github.com/agent-sandbox/agent-sandbox/internal/approval/store"
	"github.com/agent-sandbox/agent-sandbox/internal/audit"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/service"
	"github.com/agent-sandbox/agent-sandbox/internal/toolrun"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeService answers like the real service without a cluster: the real catalogue and the policy's own
// argument checks, canned results. The real one is driven by the stdio and end-to-end tests.
type fakeService struct {
	mu    sync.Mutex
	calls []string
	p     *policy.Compiled
	// clients are the clients the calls came from (service.ClientOf).
	clients []string
}

func (f *fakeService) record(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, s)
}

func (f *fakeService) Tools() ([]service.ToolInfo, error) {
	return (&service.Service{Policy: f.p}).Tools()
}

func (f *fakeService) Call(ctx context.Context, tool string, args map[string]any, p service.Progress) (any, error) {
	f.record(tool)
	f.mu.Lock()
	f.clients = append(f.clients, service.ClientOf(ctx))
	f.mu.Unlock()
	t, err := f.p.Tool(tool)
	if err != nil {
		return nil, &service.Error{Kind: service.KindDenied, Message: err.Error()}
	}
	if _, err := t.CheckAgentParams(args); errors.Is(err, policy.ErrNamespaceDenied) {
		return nil, &service.Error{Kind: service.KindDenied, RequestID: "req-aaaaaaaaaaaa", Message: "refused by policy: " + err.Error()}
	} else if err != nil {
		return nil, &service.Error{Kind: service.KindInvalid, RequestID: "req-aaaaaaaaaaaa", Message: err.Error()}
	}
	for i, st := range []string{"queued", "admitted", "credentials ready", "running", "done"} {
		if p != nil {
			p(st, i+1, 5)
		}
	}
	switch tool {
	case "k8s_get_pod_status":
		return &service.PodStatusOutput{RequestID: "req-bbbbbbbbbbbb", PodStatusResult: toolrun.PodStatusResult{Namespace: args["namespace"].(string),
			Pods: []toolrun.PodStatus{{Name: "web-1", Phase: "Running", Ready: "1/1"}}, Total: 1}}, nil
	case "terraform_apply":
		return &service.ApplyOutput{RequestID: "req-dddddddddddd", Status: service.StatusApprovalRequired, ApprovalRequest: "req-dddddddddddd",
			ApproveCommand: "agent-sandbox approve req-dddddddddddd", Message: "approval required"}, nil
	}
	return map[string]any{"request_id": "req-cccccccccccc"}, nil
}

func (f *fakeService) ApprovalStatus(context.Context, service.ApprovalStatusInput) (*service.ApprovalStatusOutput, error) {
	return &service.ApprovalStatusOutput{RequestID: "req-dddddddddddd", Status: "pending"}, nil
}

func connect(t *testing.T, svc Service, opts *sdk.ClientOptions) *sdk.ClientSession {
	t.Helper()
	p, err := policy.LoadFile("../policy/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if fs, ok := svc.(*fakeService); ok {
		fs.p = p
	}
	server, err := NewServer(svc, "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	st, ct := sdk.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := server.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test-client", Version: "1"}, opts).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs.Close()
		ss.Wait()
	})
	return cs
}

// TestToolsListGolden pins the tools/list contract agents see. UPDATE_GOLDEN=1 rewrites it.
func TestToolsListGolden(t *testing.T) {
	cs := connect(t, &fakeService{}, nil)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.MarshalIndent(res.Tools, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "tools-list.golden.json")
	if os.Getenv("UPDATE_GOLDEN") == "1" {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, append(got, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (UPDATE_GOLDEN=1 creates it)", err)
	}
	if strings.TrimSpace(string(want)) != strings.TrimSpace(string(got)) {
		t.Fatalf("tools/list differs from %s (UPDATE_GOLDEN=1 to accept):\n%s", golden, got)
	}
	names := map[string]*sdk.Tool{}
	for _, tl := range res.Tools {
		names[tl.Name] = tl
	}
	for _, n := range []string{"k8s_get_pod_status", "terraform_plan", "terraform_apply", "approval_status"} {
		if names[n] == nil {
			t.Errorf("tool %s missing", n)
		}
	}
	if a := names["terraform_apply"].Annotations; a == nil || a.DestructiveHint == nil || !*a.DestructiveHint || a.ReadOnlyHint {
		t.Errorf("terraform_apply must be marked destructive: %+v", a)
	}
	if a := names["k8s_get_pod_status"].Annotations; a == nil || !a.ReadOnlyHint {
		t.Errorf("k8s_get_pod_status must be marked read-only: %+v", a)
	}
	if a := names["terraform_plan"].Annotations; a == nil || a.ReadOnlyHint {
		t.Errorf("terraform_plan saves a plan: it must not be marked read-only: %+v", a)
	}
	// The policy is the catalogue: every policy tool is offered, its input schema carries the policy's
	// patterns, limits and allowed namespaces, and hides what the server fills in.
	if len(res.Tools) < 9 {
		t.Errorf("%d tools, want the default policy's 8 and approval_status", len(res.Tools))
	}
	for _, tl := range res.Tools {
		if tl.Name == "approval_status" {
			continue
		}
		in, _ := json.Marshal(tl.InputSchema)
		var schema struct {
			Properties map[string]struct {
				Type      string `json:"type"`
				Pattern   string `json:"pattern"`
				MaxLength int    `json:"maxLength"`
				Enum      []any  `json:"enum"`
			} `json:"properties"`
			AdditionalProperties *bool `json:"additionalProperties"`
		}
		if err := json.Unmarshal(in, &schema); err != nil {
			t.Fatal(err)
		}
		if schema.AdditionalProperties == nil || *schema.AdditionalProperties {
			t.Errorf("%s accepts arguments the policy does not declare", tl.Name)
		}
		for name, prm := range schema.Properties {
			if prm.Type == "string" && (!strings.HasPrefix(prm.Pattern, "^") || prm.MaxLength == 0) {
				t.Errorf("%s.%s: no anchored pattern or no maxLength: %+v", tl.Name, name, prm)
			}
		}
		if ns, ok := schema.Properties["namespace"]; ok && (len(ns.Enum) != 1 || ns.Enum[0] != "demo-app") {
			t.Errorf("%s.namespace enum %v, want the policy's [demo-app]", tl.Name, ns.Enum)
		}
		if _, ok := schema.Properties["source"]; ok {
			t.Errorf("%s shows the server-filled parameter source", tl.Name)
		}
		if tl.OutputSchema == nil {
			t.Errorf("%s has no output schema", tl.Name)
		}
	}
	for _, tl := range res.Tools {
		if strings.Contains(strings.ToLower(tl.Name), "approve") && tl.Name != "approval_status" {
			t.Errorf("no tool may approve anything, found %s", tl.Name)
		}
	}
}

func TestCallToolProgressAndStructuredResult(t *testing.T) {
	var mu sync.Mutex
	var stages []string
	cs := connect(t, &fakeService{}, &sdk.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *sdk.ProgressNotificationClientRequest) {
		mu.Lock()
		defer mu.Unlock()
		stages = append(stages, r.Params.Message)
	}})
	params := &sdk.CallToolParams{Name: "k8s_get_pod_status", Arguments: map[string]any{"namespace": "demo-app"}}
	params.SetProgressToken("p1")
	res, err := cs.CallTool(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError {
		t.Fatalf("unexpected tool error: %+v", res.Content)
	}
	out, _ := json.Marshal(res.StructuredContent)
	if !strings.Contains(string(out), `"web-1"`) || !strings.Contains(string(out), `"request_id":"req-bbbbbbbbbbbb"`) {
		t.Errorf("structured content %s", out)
	}
	// Notifications may arrive after the response; the session delivers them in order before closing.
	cs.Close()
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(stages, ",") != "queued,admitted,credentials ready,running,done" {
		t.Errorf("progress stages %q", stages)
	}
}

func TestDomainErrorsAreToolResults(t *testing.T) {
	cs := connect(t, &fakeService{}, nil)
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "k8s_get_pod_status", Arguments: map[string]any{"namespace": "kube-system"}})
	if err != nil {
		t.Fatalf("a policy refusal must be a tool result, not a protocol error: %v", err)
	}
	if !res.IsError || len(res.Content) != 1 {
		t.Fatalf("want isError with one line, got %+v", res)
	}
	text := res.Content[0].(*sdk.TextContent).Text
	if !strings.Contains(text, "denied: refused by policy") || !strings.Contains(text, "req-aaaaaaaaaaaa") || strings.Contains(text, "\n") {
		t.Errorf("error text %q", text)
	}
	// A malformed request (missing required argument) is rejected by the schema before the handler.
	res, err = cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "terraform_apply", Arguments: map[string]any{"workspace": "k8s-demo"}})
	if err == nil && !res.IsError {
		t.Fatalf("terraform_apply without plan_id was accepted: %+v", res)
	}
	if _, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "kubectl_exec", Arguments: map[string]any{}}); err == nil {
		t.Fatal("an unknown tool must be a protocol error")
	}
}

// TestEveryToolCallIsAudited: a call of a tool the server does not offer, and every approval_status, leave
// their lines in the audit log through the real service, its audit log and approvals database. Found in
// review (2026-12-06): the SDK refused an unknown tool before any handler ran, and approval_status wrote
// nothing, so an agent could try kubectl_exec or read every request's state with nothing on record.
func TestEveryToolCallIsAudited(t *testing.T) {
	dir := t.TempDir()
	p, err := policy.LoadFile("../policy/policy.yaml", policy.WithoutAdmissionRules())
	if err != nil {
		t.Fatal(err)
	}
	log, err := audit.Open(filepath.Join(dir, "audit.jsonl"), audit.WithSync(false))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	store, err := approvalstore.Open(filepath.Join(dir, "approvals.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	cs := connect(t, &service.Service{Policy: p, Audit: log, Approvals: store}, nil)
	ctx := context.Background()
	if _, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "kubectl_exec", Arguments: map[string]any{"namespace": "kube-system"}}); err == nil {
		t.Fatal("an unknown tool must still be a protocol error")
	}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: service.ToolApprovalStatus, Arguments: map[string]any{"request_id": "req-aaaaaaaaaaaa"}})
	if err != nil || !res.IsError {
		t.Fatalf("approval_status of a request that does not exist: %+v, %v", res, err)
	}

	if _, err := audit.VerifyFile(log.Path()); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(log.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := audit.Read(f, audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		line := r.Event + " " + r.Tool
		if reason, _ := r.Fields["reason"].(string); reason != "" {
			line += ": " + reason
		}
		got = append(got, line)
	}
	want := []string{
		"tool.request kubectl_exec",
		"guardrail.decision kubectl_exec: tool kubectl_exec is not allowed by the policy",
		"tool.result kubectl_exec: tool kubectl_exec is not allowed by the policy",
		"tool.request approval_status",
		"guardrail.decision approval_status: no approval request req-aaaaaaaaaaaa",
		"tool.result approval_status: no approval request req-aaaaaaaaaaaa",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("audit log:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
