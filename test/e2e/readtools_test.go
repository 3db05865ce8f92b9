//go:build e2e

package e2e

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/schema"
)

// TestE2EReadTools calls every read tool of the default policy on the live cluster through the MCP server,
// each in its own gVisor sandbox with its own read-only credential, and checks each structured result against
// the outputSchema the server published for it. The targets are the demo's: the web Deployment in demo-app
// and, when a scenario left one, a saved plan.
func TestE2EReadTools(t *testing.T) {
	cfg := config(t)
	cs := admin(t, cfg.AdminKubeconfig)
	p := livePolicy(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, err := demoClient(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	schemas, err := c.OutputSchemas(ctx)
	if err != nil {
		t.Fatal(err)
	}

	pods, err := cs.CoreV1().Pods("demo-app").List(ctx, metav1.ListOptions{})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("no demo-app pod to read (run after the demo set-up): %v", err)
	}
	calls := []struct {
		tool string
		args map[string]any
	}{
		{"k8s_pod_logs", map[string]any{"namespace": "demo-app", "pod": pods.Items[0].Name, "tail_lines": 20}},
		{"k8s_get_events", map[string]any{"namespace": "demo-app", "limit": 20}},
		{"k8s_describe", map[string]any{"namespace": "demo-app", "kind": "deployment"}},
		{"k8s_describe", map[string]any{"namespace": "demo-app", "kind": "service"}},
		{"k8s_describe", map[string]any{"namespace": "demo-app", "kind": "configmap"}},
		{"k8s_rollout_status", map[string]any{"namespace": "demo-app", "kind": "deployment", "name": "web"}},
	}
	plans, err := cs.CoreV1().ConfigMaps(p.Spec.Sandbox.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cm := range plans.Items {
		// The adversarial corpus leaves saved-plan ConfigMaps that are named like one but hold no plan (targets
		// of deletes admission refuses, which only the content GC removes later): read a real one, a zip.
		body := cm.BinaryData[sandbox.PlanKey]
		if _, err := zip.NewReader(bytes.NewReader(body), int64(len(body))); err != nil {
			continue
		}
		if id, ok := strings.CutPrefix(cm.Name, contract.PlanConfigMapPrefix); ok {
			calls = append(calls, struct {
				tool string
				args map[string]any
			}{"terraform_show", map[string]any{"plan_id": id}})
			break
		}
	}
	for _, call := range calls {
		t.Run(call.tool, func(t *testing.T) {
			res, err := c.Call(ctx, call.tool, call.args)
			if err != nil {
				t.Fatal(err)
			}
			if res.IsError {
				t.Fatalf("%s %v: %s", call.tool, call.args, res.Text)
			}
			sch, err := schema.Compile(schemas[call.tool])
			if err != nil {
				t.Fatalf("the published outputSchema: %v", err)
			}
			var v any
			if err := json.Unmarshal(res.Structured, &v); err != nil {
				t.Fatal(err)
			}
			if err := sch.Validate(v); err != nil {
				t.Errorf("the result does not validate against its outputSchema: %v\n%s", err, res.Structured)
			}
		})
	}
}
