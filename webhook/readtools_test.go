package webhook

import (
	"context"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// readToolCalls are the shipped policy's read tools, each with the arguments of a typical call.
var readToolCalls = []struct {
	tool   string
	params map[string]any
}{
	{"k8s_pod_logs", map[string]any{"namespace": "demo-app", "pod": "web-7d4b9c-x2x9z"}},
	{"k8s_pod_logs", map[string]any{"namespace": "demo-app", "pod": "web-7d4b9c-x2x9z", "container": "web", "tail_lines": 500, "since_seconds": 600, "previous": true}},
	{"k8s_get_events", map[string]any{"namespace": "demo-app"}},
	{"k8s_get_events", map[string]any{"namespace": "demo-app", "kind": "Pod", "name": "web-1", "type": "Warning", "limit": 10}},
	{"k8s_describe", map[string]any{"namespace": "demo-app", "kind": "deployment"}},
	{"k8s_describe", map[string]any{"namespace": "demo-app", "kind": "configmap", "name": "web-config"}},
	{"k8s_rollout_status", map[string]any{"namespace": "demo-app", "name": "web"}},
	{"k8s_rollout_status", map[string]any{"namespace": "demo-app", "kind": "statefulset", "name": "db"}},
	{"terraform_show", map[string]any{"plan_id": strings.Repeat("ab", 32)}},
}

// TestReadToolsAreExact renders every read tool's Job as the MCP server would: the webhook admits it and
// the Pod the Job controller makes of it, refuses the same Job with one more argument or another namespace,
// and every read tool's requests stay small (the node is shared).
func TestReadToolsAreExact(t *testing.T) {
	for _, call := range readToolCalls {
		t.Run(call.tool, func(t *testing.T) {
			f := newFixture(t)
			j := f.job(t, call.tool, call.params, "")
			d, err := f.checkJob(t, j, Request{})
			if err != nil {
				t.Fatalf("good Job denied: %v", err)
			}
			if d.Tool != call.tool {
				t.Errorf("decision for %q", d.Tool)
			}
			sj := asServer(t, j)
			f.c.Cluster = &fakeCluster{jobs: []*batchv1.Job{sj}}
			jc := Request{Operation: "CREATE", User: DefaultJobControllerUsers[0], Namespace: sj.Namespace}
			if _, err := f.c.CheckPod(context.Background(), jc, obj(t, podOf(t, sj)), nil); err != nil {
				t.Fatalf("its Pod denied: %v", err)
			}

			twin := j.DeepCopy()
			c := &twin.Spec.Template.Spec.Containers[0]
			c.Command = append(c.Command, "--namespace=kube-system")
			if _, err := f.checkJob(t, twin, Request{}); ruleOf(err) != "exact-command" {
				t.Errorf("a twin with another argv: %v, want exact-command", err)
			}

			for _, ctr := range j.Spec.Template.Spec.Containers {
				if cpu := ctr.Resources.Requests[corev1.ResourceCPU]; cpu.Cmp(resource.MustParse("250m")) > 0 {
					t.Errorf("container %s requests %s CPU, more than a read tool should", ctr.Name, cpu.String())
				}
			}
		})
	}
}

// TestReadToolsRefuseOtherNamespaces: a namespace outside the tool's list never renders.
func TestReadToolsRefuseOtherNamespaces(t *testing.T) {
	f := newFixture(t)
	for _, call := range readToolCalls {
		if _, ok := call.params["namespace"]; !ok {
			continue
		}
		tl, _ := f.p.Tool(call.tool)
		p := map[string]any{}
		for k, v := range call.params {
			p[k] = v
		}
		p["namespace"] = "kube-system"
		if _, err := tl.Invoke(p); err == nil {
			t.Errorf("%s rendered for kube-system", call.tool)
		}
	}
}
