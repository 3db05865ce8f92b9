//go:build e2e

package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/policy/policytest"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/test/corpus"
)

// TestE2ECustomToolFromPolicyFile: a tool declared only in a policy file (examples/policy/custom-tool.yaml
// spliced into the shipped policy, as a platform team would) goes live the way the README says — policy
// check, the chart upgraded with the policy, vault configure — with no Go change and no new image. The MCP
// server lists it, a call runs it in a gVisor sandbox with its own read-only scope, and the webhook admits
// exactly its rendered argv: a twin of its Job that lists ConfigMaps instead is refused. The deployment is
// rolled back to the shipped policy afterwards.
func TestE2ECustomToolFromPolicyFile(t *testing.T) {
	cfg := config(t)
	helm, configure := env(t, "E2E_HELM"), env(t, "E2E_VAULT_CONFIGURE")
	cs := admin(t, cfg.AdminKubeconfig)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	// The policy file: the shipped one plus the example's scopes and tools.
	doc, extra := policytest.Spliced(t, cfg.Policy, "../../examples/policy/custom-tool.yaml")
	spec := doc["spec"].(map[string]any)
	// The same tool run as another program (the same binary by another path): not one of the project's
	// runners by its argv, so its sidecar keeps the postStart gate that holds the tool back until the
	// credential exists (webhook.WaitsForCredential), as for any program a platform team brings.
	gated := map[string]any{}
	for k, v := range extra["tools"].([]any)[0].(map[string]any) {
		gated[k] = v
	}
	gated["name"] = gatedTool
	argv := append([]any{"//agent-sandbox"}, gated["command"].([]any)[1:]...)
	gated["command"] = argv
	spec["tools"] = append(spec["tools"].([]any), gated)
	egress := egressTargetsOf(t, doc)
	spec["tools"] = append(spec["tools"].([]any), egressProbeTool(egress))
	policyFile, valuesFile := writePolicy(t, doc)
	run := func(name string, args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	kubectl := func(args ...string) string {
		return run(env(t, "E2E_KUBECTL"), append([]string{"--kubeconfig", cfg.AdminKubeconfig}, args...)...)
	}

	// 1. agent-sandbox policy check.
	t.Logf("policy check: %s", strings.TrimSpace(run(cfg.Binary, "policy", "check", policyFile)))

	// 2. The chart, upgraded with the policy; rolled back whatever happens next.
	rev := strings.TrimSpace(run(helm, "--kubeconfig", cfg.AdminKubeconfig, "-n", releaseNS, "history", "agent-sandbox", "--max", "1", "-o", "json"))
	prev := jsonRevision(t, rev)
	defer func() {
		rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer rcancel()
		for _, c := range [][]string{
			{helm, "--kubeconfig", cfg.AdminKubeconfig, "-n", releaseNS, "rollback", "agent-sandbox", prev, "--wait", "--timeout", "3m"},
			{env(t, "E2E_KUBECTL"), "--kubeconfig", cfg.AdminKubeconfig, "-n", releaseNS, "rollout", "restart", "deployment/agent-sandbox-webhook"},
			{env(t, "E2E_KUBECTL"), "--kubeconfig", cfg.AdminKubeconfig, "-n", releaseNS, "rollout", "status", "deployment/agent-sandbox-webhook", "--timeout=120s"},
			{"sh", "-c", configure + " --policy " + cfg.Policy},
		} {
			if out, err := exec.CommandContext(rctx, c[0], c[1:]...).CombinedOutput(); err != nil {
				t.Errorf("restore the shipped policy: %s: %v\n%s", strings.Join(c, " "), err, out)
			}
		}
	}()
	run(helm, "--kubeconfig", cfg.AdminKubeconfig, "-n", releaseNS, "upgrade", "agent-sandbox", "../../charts/agent-sandbox",
		"--reuse-values", "-f", valuesFile, "--wait", "--timeout", "3m")
	kubectl("-n", releaseNS, "rollout", "restart", "deployment/agent-sandbox-webhook")
	kubectl("-n", releaseNS, "rollout", "status", "deployment/agent-sandbox-webhook", "--timeout=120s")

	// 3. vault configure gives Vault the new scope.
	run("sh", "-c", configure+" --policy "+policyFile)

	// The MCP server offers the tool, and a call runs it on the live cluster.
	c := cfg
	c.Policy = policyFile
	client, err := demoClient(ctx, c, "--warm=false")
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	names, err := client.ToolNames(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(names, ","), "k8s_list_services") {
		t.Fatalf("tools/list does not offer the policy's new tool: %v", names)
	}
	res, err := client.Call(ctx, "k8s_list_services", map[string]any{"namespace": "demo-app"})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError {
		t.Fatalf("k8s_list_services failed: %s", res.Text)
	}
	var out struct {
		Kind  string `json:"kind"`
		Items []struct {
			Name string `json:"name"`
		} `json:"items"`
	}
	if err := res.Decode(&out); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, it := range out.Items {
		found = found || it.Name == "web"
	}
	if out.Kind != "service" || !found {
		t.Fatalf("k8s_list_services returned %+v, want the demo's web Service", out)
	}
	t.Logf("k8s_list_services ran in a sandbox: %d Services", len(out.Items))
	// The gated twin runs too, and the webhook gave it the gate (and the runner none): a dry run returns
	// the mutated Job.
	res, err = client.Call(ctx, gatedTool, map[string]any{"namespace": "demo-app"})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError {
		t.Fatalf("%s failed: %s", gatedTool, res.Text)
	}
	if err := res.Decode(&out); err != nil || out.Kind != "service" {
		t.Fatalf("%s returned %+v (%v)", gatedTool, out, err)
	}
	res, err = client.Call(ctx, "k8s_list_services", map[string]any{"namespace": "kube-system"})
	if err != nil || !res.IsError {
		t.Errorf("k8s_list_services in kube-system was not refused: %v %+v", err, res)
	}

	// The webhook enforces its exact argv: the rendered Job is admitted (server dry run), its twin that
	// lists ConfigMaps is refused.
	p, err := policy.LoadFile(policyFile)
	if err != nil {
		t.Fatal(err)
	}
	// render renders tool name's Job for demo-app, with a well-formed audit head, so that the twin below is
	// refused for its argv and nothing else.
	render := func(name string) *batchv1.Job {
		t.Helper()
		tl, err := p.Tool(name)
		if err != nil {
			t.Fatal(err)
		}
		inv, err := tl.Invoke(map[string]any{"namespace": "demo-app"})
		if err != nil {
			t.Fatal(err)
		}
		id, _ := approval.NewRequestID()
		j, err := sandbox.RenderJob(p, sandbox.JobSpec{Invocation: inv, RequestID: id, AuditHead: corpus.AuditHead})
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	// Each exact Job is admitted (server dry run, which returns the mutated Job): the runner's credential
	// agent without the postStart gate, the other program's with it.
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	for name, wantGate := range map[string]bool{"k8s_list_services": false, gatedTool: true} {
		j := render(name)
		got, err := cs.BatchV1().Jobs(j.Namespace).Create(ctx, j, dry)
		if err != nil {
			t.Fatalf("%s's exact Job is refused: %v", name, err)
		}
		gate := false
		for _, c := range got.Spec.Template.Spec.InitContainers {
			if c.Name == contract.CredentialAgentContainer {
				gate = c.Lifecycle != nil && c.Lifecycle.PostStart != nil
			}
		}
		if gate != wantGate {
			t.Errorf("%s: the admitted Job's credential agent has a postStart gate: %v, want %v", name, gate, wantGate)
		}
	}
	job := render("k8s_list_services")
	twin := job.DeepCopy()
	cmd := twin.Spec.Template.Spec.Containers[0].Command
	cmd[len(cmd)-1] = "--kind=configmap"
	_, err = cs.BatchV1().Jobs(job.Namespace).Create(ctx, twin, metav1.CreateOptions{})
	if err == nil {
		_ = cs.BatchV1().Jobs(job.Namespace).Delete(context.Background(), twin.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
		t.Fatal("a Job running the custom tool with another argv was admitted")
	}
	t.Logf("twin with --kind=configmap refused: %v", err)

	// Real packets from an admitted sandbox Pod in the sandbox namespace: the API server and Vault are
	// reached, everything else is dropped.
	peer := webhookPeer(t, ctx, cs)
	probe, err := p.Tool(egressProbeToolName)
	if err != nil {
		t.Fatal(err)
	}
	inv, err := probe.Invoke(map[string]any{"namespace": "demo-app", "peer": peer})
	if err != nil {
		t.Fatal(err)
	}
	id, _ := approval.NewRequestID()
	probeJob, err := sandbox.RenderJob(p, sandbox.JobSpec{Invocation: inv, RequestID: id, AuditHead: corpus.AuditHead})
	if err != nil {
		t.Fatal(err)
	}
	checkSandboxEgress(t, ctx, cs, egress, peer, probeJob)
}

// gatedTool is the example's tool run as a program that is not one of the project's runners.
const gatedTool = "k8s_list_services_gated"

// releaseNS is where make deploy installs the chart.
const releaseNS = "agent-sandbox-system"

func jsonRevision(t *testing.T, historyJSON string) string {
	t.Helper()
	var h []struct {
		Revision int `json:"revision"`
	}
	if err := yaml.Unmarshal([]byte(historyJSON), &h); err != nil || len(h) == 0 {
		t.Fatalf("helm history: %v %q", err, historyJSON)
	}
	return strconv.Itoa(h[len(h)-1].Revision)
}
