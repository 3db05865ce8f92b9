//go:build integration

package integration

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agent-sandbox/agent-sandbox/internal/audit"
	"github.com/agent-sandbox/agent-sandbox/mcp"
	"github.com/agent-sandbox/agent-sandbox/test/harness"
)

// TestMCPStdioRealBinary drives the built binary over stdio with the Go SDK's client against a real
// kube-apiserver: initialize, tools/list, refusals as tool errors, progress, and a cancelled call whose Job
// is deleted. (There is no kubelet here, so an admitted Job never runs: exactly what cancellation needs.)
func TestMCPStdioRealBinary(t *testing.T) {
	api := harness.StartAPIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, ns := range []*corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: "agent-sandbox"}}, localNamespace(t, "demo-app")} {
		if _, err := api.Clientset.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "agent-sandbox")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/agent-sandbox").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	if err := os.MkdirAll(filepath.Join(dir, "workspaces"), 0o755); err != nil {
		t.Fatal(err)
	}
	auditLog := filepath.Join(dir, "audit.jsonl")
	cmd := exec.Command(bin, "mcp", "--policy", "../../policy/policy.yaml", "--kubeconfig", api.KubeconfigPath,
		"--workspaces", filepath.Join(dir, "workspaces"), "--db", filepath.Join(dir, "approvals.db"), "--audit-log", auditLog)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	c, err := mcp.DialCommand(ctx, cmd)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !strings.HasPrefix(c.ServerName(), "agent-sandbox") {
		t.Errorf("server %q", c.ServerName())
	}
	tools, err := c.ToolNames(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"k8s_get_pod_status", "terraform_plan", "terraform_apply", "approval_status"} {
		if !slices.Contains(tools, want) {
			t.Errorf("tools/list lacks %s: %v", want, tools)
		}
	}

	for _, tc := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"k8s_get_pod_status", map[string]any{"namespace": "kube-system"}, "denied: refused by policy"},
		{"approval_status", map[string]any{"request_id": "req-aaaaaaaaaaaa"}, "no approval request"},
		{"terraform_plan", map[string]any{"workspace": "nope"}, "must match"},
		{"terraform_apply", map[string]any{"workspace": "nope", "plan_id": "latest"}, "invalid"},
	} {
		res, err := c.Call(ctx, tc.tool, tc.args)
		if err != nil {
			t.Fatalf("%s: a domain failure came back as a protocol error: %v", tc.tool, err)
		}
		if !res.IsError || !strings.Contains(res.Text, tc.want) {
			t.Errorf("%s %v: %+v, want an error saying %q", tc.tool, tc.args, res, tc.want)
		}
	}

	// A call cancelled while its sandbox is admitted but not finished: the Job must be deleted.
	admitted := make(chan struct{}, 1)
	c.OnProgress = func(msg string, _, _ float64) {
		if msg == "admitted" {
			select {
			case admitted <- struct{}{}:
			default:
			}
		}
	}
	callCtx, cancelCall := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := c.Call(callCtx, "k8s_get_pod_status", map[string]any{"namespace": "demo-app"})
		done <- err
	}()
	select {
	case <-admitted:
	case err := <-done:
		t.Fatalf("the call ended before its Job was admitted: %v", err)
	case <-ctx.Done():
		t.Fatal("no 'admitted' progress notification")
	}
	jobs, err := api.Clientset.BatchV1().Jobs("agent-sandbox").List(ctx, metav1.ListOptions{})
	if err != nil || len(jobs.Items) != 1 {
		t.Fatalf("while running: %d Jobs, %v", len(jobs.Items), err)
	}
	cancelCall()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Logf("the cancelled call returned %v", err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		jobs, err = api.Clientset.BatchV1().Jobs("agent-sandbox").List(ctx, metav1.ListOptions{})
		if err == nil && len(jobs.Items) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cancelled call's Job was not deleted: %d left", len(jobs.Items))
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The audit chain of the cancelled call ends with its result.
	for deadline := time.Now().Add(10 * time.Second); ; {
		recs, err := audit.ReadFile(auditLog, audit.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		last := recs[len(recs)-1]
		if last.Event == audit.EventToolResult && strings.Contains(last.Fields["reason"].(string), "cancelled") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no tool.result for the cancelled call; last event %s %v", last.Event, last.Fields)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := audit.VerifyFile(auditLog); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stderr.String(), "panic") {
		t.Errorf("server stderr:\n%s", stderr.String())
	}
}
