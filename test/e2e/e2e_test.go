//go:build e2e

// Package e2e runs agent-sandbox end to end on a live cluster set up by `make deploy` (scripts/e2e.sh
// prepares everything and passes the paths in E2E_* variables): the real binary as an MCP server over
// stdio, real gVisor Jobs, the webhook, Vault, Terraform, a human approval through a pseudo-terminal, and a
// second MCP client that nobody here wrote (the official TypeScript SDK, from npm).
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/agent-sandbox/agent-sandbox/internal/audit"
	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/telemetry"
	"github.com/agent-sandbox/agent-sandbox/internal/telemetry/telemetrytest"
	"github.com/agent-sandbox/agent-sandbox/internal/tfcheck"
	"github.com/agent-sandbox/agent-sandbox/mcp"
	"github.com/agent-sandbox/agent-sandbox/test/corpus"
	"github.com/agent-sandbox/agent-sandbox/test/demo"
)

var jwtRE = regexp.MustCompile(`eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]*`)

func env(t *testing.T, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Fatalf("%s is not set: run the end-to-end tests with `make e2e` (scripts/e2e.sh), after `make deploy`", name)
	}
	return v
}

func config(t *testing.T) demo.Config {
	dir := env(t, "E2E_DIR")
	return demo.Config{
		Binary: env(t, "E2E_BINARY"), Policy: env(t, "E2E_POLICY"), MCPKubeconfig: env(t, "E2E_MCP_KUBECONFIG"),
		AdminKubeconfig: env(t, "E2E_ADMIN_KUBECONFIG"), Workspaces: filepath.Join(dir, "workspaces"),
		DB: filepath.Join(dir, "approvals.db"), AuditLog: filepath.Join(dir, "audit.jsonl"),
		ApproverKey: env(t, "E2E_APPROVER_KEY"), PassphraseFile: env(t, "E2E_PASSPHRASE_FILE"), Audience: env(t, "E2E_AUDIENCE"),
	}
}

// livePolicy is the policy the live cluster runs (the file in $E2E_POLICY), compiled.
func livePolicy(t *testing.T, cfg demo.Config) *policy.Compiled {
	t.Helper()
	p, err := policy.LoadFile(cfg.Policy)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// demoDeployment is the demo's Deployment, demo-app/web, as the API server has it now.
func demoDeployment(t *testing.T, ctx context.Context, cs kubernetes.Interface) *appsv1.Deployment {
	t.Helper()
	dep, err := cs.AppsV1().Deployments("demo-app").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return dep
}

func admin(t *testing.T, kubeconfig string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// TestE2EScenario plays the whole story and checks every claim of it on the live cluster.
func TestE2EScenario(t *testing.T) {
	cfg := config(t)
	var out bytes.Buffer
	cfg.Out = &out
	cs := admin(t, cfg.AdminKubeconfig)
	p := livePolicy(t, cfg)
	ns := p.Spec.Sandbox.Namespace

	// Observe the sandbox namespace while the scenario runs: every sandbox Pod must run under gVisor with
	// the injected credential agent. (Polled, not watched: this etcd (3.4) lets a watch lag behind.)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var mu sync.Mutex
	pods := map[string]*corev1.Pod{}
	pollCtx, stopPoll := context.WithCancel(ctx)
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for pollCtx.Err() == nil {
			if list, err := cs.CoreV1().Pods(ns).List(pollCtx, metav1.ListOptions{}); err == nil {
				mu.Lock()
				for i := range list.Items {
					pods[list.Items[i].Name] = &list.Items[i]
				}
				mu.Unlock()
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()

	r, err := demo.Run(ctx, cfg)
	stopPoll()
	<-polled
	t.Logf("scenario output:\n%s", out.String())
	if err != nil {
		t.Fatalf("scenario: %v", err)
	}

	t.Run("pod status comes from gVisor sandboxes", func(t *testing.T) {
		if len(r.Pods.Pods) == 0 || !strings.HasPrefix(r.Pods.Pods[0].Name, "web-") {
			t.Fatalf("k8s_get_pod_status did not return the demo-app pods: %+v", r.Pods)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(pods) == 0 {
			t.Fatal("no sandbox Pod was seen")
		}
		t.Logf("%d sandbox Pods seen, all under %s with the credential agent", len(pods), p.Spec.Sandbox.RuntimeClassName)
		for name, pod := range pods {
			if pod.Spec.RuntimeClassName == nil || *pod.Spec.RuntimeClassName != p.Spec.Sandbox.RuntimeClassName {
				t.Errorf("sandbox Pod %s does not run under %s", name, p.Spec.Sandbox.RuntimeClassName)
			}
			// The credential agent is the last init container; a tool with a check (Terraform) runs it first.
			var inits []string
			for _, c := range pod.Spec.InitContainers {
				inits = append(inits, c.Name)
			}
			if !slices.Equal(inits, []string{contract.CredentialAgentContainer}) && !slices.Equal(inits, []string{contract.CheckContainer, contract.CredentialAgentContainer}) {
				t.Errorf("sandbox Pod %s has init containers %v, not the credential agent (after the check)", name, inits)
			}
		}
	})
	t.Run("kube-system is refused by the server", func(t *testing.T) {
		if !strings.Contains(r.KubeSystemRefusal, "denied") || !strings.Contains(r.KubeSystemRefusal, "kube-system") {
			t.Errorf("refusal %q", r.KubeSystemRefusal)
		}
	})
	t.Run("plan flags forces replacement", func(t *testing.T) {
		if !r.CleanPlan.NoChanges {
			t.Error("the first plan was not clean")
		}
		var names []string
		for _, s := range r.ReplacePlan.DestructiveSignals {
			names = append(names, s.Name)
		}
		if !slices.Contains(names, "forces-replacement") || r.ReplacePlan.Summary.Replace != 1 {
			t.Errorf("signals %v, summary %+v", names, r.ReplacePlan.Summary)
		}
	})
	t.Run("apply waits for approval, then replaces the Deployment once", func(t *testing.T) {
		if r.ApprovalRequired.Status != "approval_required" || !strings.HasPrefix(r.ApprovalRequired.ApproveCommand, "agent-sandbox approve req-") {
			t.Errorf("first apply: %+v", r.ApprovalRequired)
		}
		if !strings.Contains(r.ApproveTranscript, "forces-replacement") || !strings.Contains(r.ApproveTranscript, "approved "+r.ApprovalRequired.ApprovalRequest) {
			t.Errorf("the approver did not see the destructive signal, or did not approve:\n%s", r.ApproveTranscript)
		}
		if r.Applied.Status != "applied" || r.Applied.Result == nil || !r.Applied.Result.Applied {
			t.Errorf("second apply: %+v", r.Applied)
		}
		if r.DeploymentBefore == "" || r.DeploymentBefore == r.DeploymentAfter {
			t.Errorf("Deployment not replaced: %s -> %s", r.DeploymentBefore, r.DeploymentAfter)
		}
	})
	t.Run("a used approval is refused when replayed", func(t *testing.T) {
		if r.ReplayThroughServer.Status != "approval_required" || r.ReplayThroughServer.ApprovalRequest == r.ApprovalRequired.ApprovalRequest {
			t.Errorf("the server reused the grant: %+v", r.ReplayThroughServer)
		}
		if !corpus.Refused(r.ReplayAtCluster, "already used") {
			t.Errorf("replay at the cluster: %v", r.ReplayAtCluster)
		}
	})
	t.Run("every call leaves the full audit chain and the chain verifies", func(t *testing.T) {
		if _, err := audit.VerifyFile(cfg.AuditLog); err != nil {
			t.Fatal(err)
		}
		recs, err := audit.ReadFile(cfg.AuditLog, audit.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		chains := map[string][]string{}
		for _, rec := range recs {
			chains[rec.RequestID] = append(chains[rec.RequestID], rec.Event)
		}
		sandboxChain := []string{audit.EventToolRequest, audit.EventGuardrailDecision, audit.EventSandboxStarted, audit.EventCredentialIssued,
			audit.EventSandboxCompleted, audit.EventCredentialRevoked, audit.EventToolResult}
		for _, id := range r.RequestIDs {
			got := chains[id]
			if len(got) == 0 {
				t.Errorf("request %s left no audit record", id)
				continue
			}
			if got[0] != audit.EventToolRequest || got[len(got)-1] != audit.EventToolResult {
				t.Errorf("request %s: chain %v does not start with tool.request and end with tool.result", id, got)
			}
			if slices.Contains(got, audit.EventSandboxStarted) && !isSubsequence(sandboxChain, got) {
				t.Errorf("request %s: chain %v lacks the sandbox chain %v", id, got, sandboxChain)
			}
		}
		applied := chains[r.Applied.RequestID]
		for _, ev := range []string{audit.EventApprovalGranted, audit.EventApprovalConsumed} {
			if !slices.Contains(applied, ev) {
				t.Errorf("the approved apply's chain %v lacks %s", applied, ev)
			}
		}
		if !slices.Contains(chains[r.ApprovalRequired.RequestID], audit.EventApprovalRequested) {
			t.Errorf("the first apply's chain lacks approval.requested")
		}
	})
	t.Run("no Vault-minted ServiceAccount remains", func(t *testing.T) {
		if len(r.LeftoverVaultObjects) > 0 {
			t.Errorf("left over: %v", r.LeftoverVaultObjects)
		}
	})
	t.Run("no token in tool results, the audit log or the server log", func(t *testing.T) {
		logData, _ := os.ReadFile(cfg.AuditLog)
		for name, data := range map[string]string{
			"tool results": strings.Join(r.ToolResults, "\n"), "audit log": string(logData), "server log": r.ServerLog.String(),
			"approve transcript": r.ApproveTranscript,
		} {
			if m := jwtRE.FindString(data); m != "" {
				t.Errorf("a JWT-shaped string appears in the %s: %.20s…", name, m)
			}
		}
	})
}

// TestE2EBypassKubeSystem: creating the sandbox Job for kube-system directly, bypassing the server, is
// refused by admission.
func TestE2EBypassKubeSystem(t *testing.T) {
	cfg := config(t)
	cs := admin(t, cfg.AdminKubeconfig)
	p := livePolicy(t, cfg)
	e := &corpus.Env{Policy: p, Identities: &corpus.Identities{Admin: cs, Attacker: cs}, Run: "e2e"}
	j := e.Job("k8s_get_pod_status", corpus.PodParams(), "")
	j.Annotations[contract.AnnotationParams] = `{"namespace":"kube-system"}`
	j.Spec.Template.Annotations[contract.AnnotationParams] = j.Annotations[contract.AnnotationParams]
	j.Spec.Template.Spec.Containers[0].Command[3] = "--namespace=kube-system"
	_, err := e.CreateJob(context.Background(), j, false)
	defer e.Cleanup(context.Background())
	if !corpus.Refused(err, "namespace-not-allowed") {
		t.Fatalf("a kube-system Job created directly was not refused: %v", err)
	}
}

// TestE2ESecondClientFromNPM: the official TypeScript SDK's client lists the tools and calls
// k8s_get_pod_status successfully.
func TestE2ESecondClientFromNPM(t *testing.T) {
	cfg := config(t)
	dir := env(t, "E2E_NODE_CLIENT")
	cmd := exec.Command("node", filepath.Join(dir, "client.mjs"), cfg.Binary, "--policy", cfg.Policy, "--kubeconfig", cfg.MCPKubeconfig,
		"--workspaces", cfg.Workspaces, "--db", filepath.Join(t.TempDir(), "approvals.db"), "--audit-log", keptAuditLog(t))
	// Every read tool too: the SDK checks each structured result against the tool's outputSchema.
	// A Pod that stays: the scenario just replaced the Deployment, and its old Pods are going away.
	var logPod string
	for end := time.Now().Add(time.Minute); logPod == "" && time.Now().Before(end); time.Sleep(time.Second) {
		pods, err := admin(t, cfg.AdminKubeconfig).CoreV1().Pods("demo-app").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
				logPod = p.Name
				break
			}
		}
	}
	if logPod == "" {
		t.Fatal("no running demo-app Pod to read the logs of")
	}
	calls, err := json.Marshal([]map[string]any{
		{"name": "k8s_pod_logs", "arguments": map[string]any{"namespace": "demo-app", "pod": logPod, "tail_lines": 20}},
		{"name": "k8s_get_events", "arguments": map[string]any{"namespace": "demo-app"}},
		{"name": "k8s_describe", "arguments": map[string]any{"namespace": "demo-app", "kind": "deployment"}},
		{"name": "k8s_rollout_status", "arguments": map[string]any{"namespace": "demo-app", "name": "web"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	cmd.Env = append(os.Environ(), "E2E_CALLS="+string(calls))
	res, out := runNodeClient(t, "node client", cmd)
	if !slices.Contains(res.Tools, "k8s_get_pod_status") || res.IsError || len(res.Structured.Pods) == 0 {
		t.Fatalf("node client result: %s", out)
	}
	if len(res.Calls) != 4 {
		t.Errorf("node client made %d read calls, want 4: %s", len(res.Calls), out)
	}
	for _, c := range res.Calls {
		if c.IsError || !c.Structured {
			t.Errorf("TypeScript SDK client, %s: error %q %q (structured %v)", c.Name, c.Text, c.Error, c.Structured)
		}
	}
	t.Logf("TypeScript SDK client: tools %v, %d pods, progress %v", res.Tools, len(res.Structured.Pods), res.Progress)
}

// TestE2EVaultDown: with Vault unreachable the call fails with a clear error and leaves no Job behind
// (invariant 7). It stops the local Vault and starts it again (E2E_VAULT_RESTART), so it runs last.
func TestE2EVaultDown(t *testing.T) {
	cfg := config(t)
	stop, restart := os.Getenv("E2E_VAULT_STOP"), os.Getenv("E2E_VAULT_RESTART")
	if stop == "" || restart == "" {
		t.Fatal("E2E_VAULT_STOP and E2E_VAULT_RESTART must name commands that stop and restart Vault")
	}
	if out, err := exec.Command("sh", "-c", stop).CombinedOutput(); err != nil {
		t.Fatalf("stop Vault: %v\n%s", err, out)
	}
	defer func() {
		if out, err := exec.Command("sh", "-c", restart).CombinedOutput(); err != nil {
			t.Errorf("restart Vault: %v\n%s", err, out)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs := admin(t, cfg.AdminKubeconfig)
	p := livePolicy(t, cfg)
	// A warm call (the pool is on) and a cold one: a cold Pod's runner starts beside the credential agent
	// and waits for its kubeconfig, so the agent's failure, not the runner's wait, must end the call.
	for _, mode := range []struct {
		name  string
		extra []string
	}{{"warm", nil}, {"cold", []string{"--warm=false"}}} {
		client, err := demoClient(ctx, cfg, mode.extra...)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		res, err := client.Call(ctx, "k8s_get_pod_status", map[string]any{"namespace": "demo-app"})
		client.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !res.IsError || !strings.Contains(res.Text, "the credential agent could not get a credential") || !strings.Contains(res.Text, "vault") {
			t.Fatalf("%s: with Vault down the call did not fail clearly: %+v", mode.name, res)
		}
		t.Logf("%s: failed after %s: %s", mode.name, time.Since(start).Round(time.Millisecond), res.Text)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		// The pool's unclaimed warm Jobs are no call's; a claimed one served a call and must be gone like a
		// cold Job.
		left, err := sandbox.CallJobs(ctx, cs, p.Spec.Sandbox.Namespace)
		if err != nil {
			t.Fatal(err)
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Jobs left behind: %v", left)
		}
		time.Sleep(time.Second)
	}
}

// nodeClientResult is what the TypeScript SDK's client (client.mjs) prints last, as one line of JSON.
type nodeClientResult struct {
	Calls []struct {
		Name       string `json:"name"`
		IsError    bool   `json:"isError"`
		Structured bool   `json:"structured"`
		Text       string `json:"text"`
		Error      string `json:"error"`
	} `json:"calls"`
	Tools           []string `json:"tools"`
	ProtocolVersion string   `json:"protocolVersion"`
	IsError         bool     `json:"isError"`
	Structured      struct {
		Pods []struct {
			Name  string `json:"name"`
			Phase string `json:"phase"`
		} `json:"pods"`
	} `json:"structured"`
	Progress []string `json:"progress"`
}

// runNodeClient runs the TypeScript SDK's client cmd and decodes its result, returned with all it printed;
// what names the run in failures.
func runNodeClient(t *testing.T, what string, cmd *exec.Cmd) (nodeClientResult, []byte) {
	t.Helper()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", what, err, stderr.String())
	}
	var res nodeClientResult
	if err := json.Unmarshal(lastLine(out), &res); err != nil {
		t.Fatalf("node client output %q: %v", out, err)
	}
	return res, out
}

func isSubsequence(want, got []string) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}

func lastLine(b []byte) []byte {
	var last []byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 8<<20)
	for sc.Scan() {
		if l := bytes.TrimSpace(sc.Bytes()); len(l) > 0 {
			last = append([]byte(nil), l...)
		}
	}
	return last
}

// demoClient starts the MCP server for cfg and connects to it.
func demoClient(ctx context.Context, cfg demo.Config, extra ...string) (*mcp.Client, error) {
	args := append([]string{"mcp", "--policy", cfg.Policy, "--kubeconfig", cfg.MCPKubeconfig,
		"--workspaces", cfg.Workspaces, "--db", cfg.DB, "--audit-log", cfg.AuditLog}, extra...)
	return mcp.DialCommand(ctx, exec.CommandContext(ctx, cfg.Binary, args...))
}

// TestE2EWarmPool: with the pool on, a k8s_get_pod_status call is served by a warm Pod (claimed, then
// discarded, the pool refilled); with it off (--warm=false) the same call runs as a cold Job. Both return
// the demo-app Pods with the full audit chain, and the claimed warm Job is gone afterwards.
func TestE2EWarmPool(t *testing.T) {
	cfg := config(t)
	cs := admin(t, cfg.AdminKubeconfig)
	p := livePolicy(t, cfg)
	ns := p.Spec.Sandbox.Namespace
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	env := &corpus.Env{Policy: p, Identities: &corpus.Identities{Admin: cs}}
	for _, mode := range []struct {
		name string
		args []string
		warm bool
	}{{"pool on", nil, true}, {"pool off", []string{"--warm=false"}, false}} {
		t.Run(mode.name, func(t *testing.T) {
			if mode.warm {
				if _, err := env.WaitWarmPod(ctx, 3*time.Minute); err != nil {
					t.Fatal(err)
				}
			}
			c := cfg
			c.DB, c.AuditLog = filepath.Join(t.TempDir(), "approvals.db"), keptAuditLog(t)
			// The server exports the call's trace to a real OTLP/HTTP receiver (docs/tracing.md).
			otlp := telemetrytest.NewReceiver(t)
			client, err := demoClient(ctx, c, append(mode.args, "--otlp-endpoint", otlp.URL)...)
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			res, err := client.Call(ctx, "k8s_get_pod_status", map[string]any{"namespace": "demo-app"})
			if err != nil {
				t.Fatal(err)
			}
			if res.IsError || !strings.Contains(res.Text, `"web-`) {
				t.Fatalf("the call did not return the demo-app Pods: %s", res.Text)
			}
			recs, err := audit.ReadFile(c.AuditLog, audit.Filter{})
			if err != nil {
				t.Fatal(err)
			}
			client.Close() // the server exits and flushes its spans
			checkCallTrace(t, otlp, recs[0].RequestID, mode.warm)
			var chain []string
			var job string
			var warm bool
			for _, r := range recs {
				chain = append(chain, r.Event)
				if r.Event == audit.EventSandboxCompleted {
					job, _ = r.Fields["job"].(string)
					warm, _ = r.Fields["warm"].(bool)
				}
			}
			want := []string{audit.EventToolRequest, audit.EventGuardrailDecision, audit.EventSandboxStarted, audit.EventCredentialIssued,
				audit.EventSandboxCompleted, audit.EventCredentialRevoked, audit.EventToolResult}
			if !isSubsequence(want, chain) {
				t.Errorf("audit chain %v lacks %v", chain, want)
			}
			if warm != mode.warm {
				t.Errorf("the call was served warm=%v (Job %s), want warm=%v", warm, job, mode.warm)
			}
			if _, ok := sandboxWarmSuffix(job); ok != mode.warm {
				t.Errorf("the serving Job %s is warm=%v by its name, want %v", job, ok, mode.warm)
			}
			// The serving Job, warm or cold, is deleted with the call.
			deadline := time.Now().Add(time.Minute)
			for {
				_, err := cs.BatchV1().Jobs(ns).Get(ctx, job, metav1.GetOptions{})
				if err != nil {
					break
				}
				if time.Now().After(deadline) {
					t.Errorf("Job %s still exists a minute after its call", job)
					break
				}
				time.Sleep(500 * time.Millisecond)
			}
		})
	}
	if _, err := env.WaitWarmPod(ctx, 3*time.Minute); err != nil {
		t.Errorf("the pool did not refill: %v", err)
	}
}

// checkCallTrace waits for the call's trace and checks that it follows the call from the MCP request
// through the sandbox to the credential's issue and revoke, under the trace ID the request ID gives.
func checkCallTrace(t *testing.T, otlp *telemetrytest.Receiver, requestID string, warm bool) {
	t.Helper()
	traceID := telemetry.TraceIDFor(requestID).String()
	var spans map[string]telemetrytest.ReceivedSpan
	for deadline := time.Now().Add(20 * time.Second); ; {
		spans = map[string]telemetrytest.ReceivedSpan{}
		for _, s := range otlp.Spans() {
			if s.TraceID == traceID {
				spans[s.Name] = s
			}
		}
		if _, ok := spans["tools/call k8s_get_pod_status"]; ok || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	root, ok := spans["tools/call k8s_get_pod_status"]
	if !ok {
		t.Fatalf("no trace %s for request %s reached the OTLP receiver (got %d spans)", traceID, requestID, len(otlp.Spans()))
	}
	if root.Attrs["agent_sandbox.request_id"] != requestID || root.Attrs["agent_sandbox.outcome"] != "ok" {
		t.Errorf("root span attributes %v", root.Attrs)
	}
	want := []string{"admission", "credential", "run", "cleanup"}
	if !warm {
		want = append(want, "pod_start")
	}
	for _, name := range want {
		s, ok := spans[name]
		if !ok {
			t.Errorf("trace %s lacks span %q (has %d spans)", traceID, name, len(spans))
			continue
		}
		if s.Parent == "" {
			t.Errorf("span %q has no parent", name)
		}
	}
	if cred := spans["credential"]; !isSubsequence([]string{"credential.issued", "credential.revoked"}, cred.Events) {
		t.Errorf("the credential span's events are %v, want credential.issued then credential.revoked", cred.Events)
	}
	if _, ok := spans["pod_start"]; ok && warm {
		t.Error("a warm call's trace has a pod_start span")
	}
}

func sandboxWarmSuffix(job string) (string, bool) {
	return sandbox.WarmSuffix("k8s_get_pod_status", job)
}

// TestE2ESandboxNamespaceGuards: the live sandbox namespace enforces restricted Pod Security, is guarded by
// the webhook, and its NetworkPolicies deny all traffic but DNS, the API server and Vault. (That the
// enforcer really drops traffic is shown by make verify-cluster.)
func TestE2ESandboxNamespaceGuards(t *testing.T) {
	cfg := config(t)
	cs := admin(t, cfg.AdminKubeconfig)
	p := livePolicy(t, cfg)
	ctx := context.Background()
	ns, err := cs.CoreV1().Namespaces().Get(ctx, p.Spec.Sandbox.Namespace, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ns.Labels["pod-security.kubernetes.io/enforce"] != "restricted" || ns.Labels[contract.LabelSandboxNamespace] != "true" {
		t.Errorf("namespace labels %v", ns.Labels)
	}
	nps, err := cs.NetworkingV1().NetworkPolicies(ns.Name).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	denyAll := false
	for _, np := range nps.Items {
		if len(np.Spec.PodSelector.MatchLabels) == 0 && len(np.Spec.Egress) == 0 && slices.Contains(np.Spec.PolicyTypes, "Egress") {
			denyAll = true
		}
		for _, rule := range np.Spec.Egress {
			for _, to := range rule.To {
				if to.IPBlock != nil && (to.IPBlock.CIDR == "0.0.0.0/0" || strings.HasSuffix(to.IPBlock.CIDR, "/0")) {
					t.Errorf("%s allows egress to everything", np.Name)
				}
			}
			if len(rule.To) == 0 {
				t.Errorf("%s allows egress to any destination on %v", np.Name, rule.Ports)
			}
		}
	}
	if !denyAll {
		t.Errorf("no default-deny egress NetworkPolicy in %s (found %d policies)", ns.Name, len(nps.Items))
	}
}

// TestE2ETerraformAttacksThroughMCP: the Terraform attacks that got through before — apply-time exec hidden
// behind terraform.applying, a plan that writes a Secret, a plan that reads one or the credential file into
// its output — are refused by the MCP server before anything reaches the cluster. (Submitted straight to
// the cluster, bypassing the server, the same workspaces are refused by the sandbox's check container:
// `make verify`, section 4.) A Secret with a known value in the target namespace appears in no tool
// result and no audit line, neither of the refused calls nor of a real plan of the demo workspace.
func TestE2ETerraformAttacksThroughMCP(t *testing.T) {
	cfg := config(t)
	cs := admin(t, cfg.AdminKubeconfig)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	secret := "e2e-known-" + strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "")
	_, err := cs.CoreV1().Secrets("demo-app").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-known-value"}, StringData: map[string]string{"password": secret},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.CoreV1().Secrets("demo-app").Delete(context.Background(), "e2e-known-value", metav1.DeleteOptions{})

	cases, err := tfcheck.Corpus("../../internal/tfcheck/testdata")
	if err != nil {
		t.Fatal(err)
	}
	attacks := map[string]bool{"provider-dynamic-exec-applying": true, "resource-kubernetes-secret": true,
		"data-kubernetes-secret": true, "output-file-kubeconfig": true, "null-resource-local-exec": true, "provider-exec-comment": true}
	var results []string
	auditLog := keptAuditLog(t)
	run := func(name string, files map[string][]byte) mcp.Result {
		t.Helper()
		ws := t.TempDir()
		if err := os.Mkdir(filepath.Join(ws, "k8s-demo"), 0o755); err != nil {
			t.Fatal(err)
		}
		for n, d := range files {
			if err := os.WriteFile(filepath.Join(ws, "k8s-demo", n), d, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		c := cfg
		c.Workspaces, c.DB, c.AuditLog = ws, filepath.Join(t.TempDir(), "approvals.db"), auditLog
		client, err := demoClient(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		res, err := client.Call(ctx, "terraform_plan", map[string]any{"workspace": "k8s-demo"})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		results = append(results, res.Text)
		return *res
	}
	p := livePolicy(t, cfg)
	jobsBefore, _ := cs.BatchV1().Jobs(p.Spec.Sandbox.Namespace).List(ctx, metav1.ListOptions{})
	n := 0
	for _, c := range cases {
		if !attacks[strings.TrimPrefix(c.Name, "malicious/")] {
			continue
		}
		n++
		res := run(c.Name, c.Files)
		if !res.IsError || !strings.Contains(res.Text, "refused") || !strings.Contains(res.Text, c.Reason) {
			t.Errorf("%s: not refused by the server for %q: %s", c.Name, c.Reason, res.Text)
		}
	}
	if n != len(attacks) {
		t.Fatalf("found %d of the %d attacks in the corpus", n, len(attacks))
	}
	jobsAfter, _ := cs.BatchV1().Jobs(p.Spec.Sandbox.Namespace).List(ctx, metav1.ListOptions{})
	if len(jobsAfter.Items) > len(jobsBefore.Items) {
		t.Errorf("refused workspaces made Jobs: %d before, %d after", len(jobsBefore.Items), len(jobsAfter.Items))
	}

	// A real plan of the demo workspace, with the Secret in its namespace, for contrast.
	good := map[string][]byte{}
	tfs, _ := filepath.Glob("../../terraform/k8s-demo/*.tf")
	for _, f := range tfs {
		good[filepath.Base(f)], _ = os.ReadFile(f)
	}
	if res := run("good/k8s-demo", good); res.IsError {
		t.Fatalf("the demo workspace's plan failed: %s", res.Text)
	}

	logData, _ := os.ReadFile(auditLog)
	for name, data := range map[string]string{"tool results": strings.Join(results, "\n"), "audit log": string(logData)} {
		if strings.Contains(data, secret) {
			t.Errorf("the Secret's value appears in the %s", name)
		}
		if m := jwtRE.FindString(data); m != "" {
			t.Errorf("a JWT-shaped string appears in the %s: %.20s…", name, m)
		}
	}
	t.Logf("%d Terraform attacks refused by the MCP server before any Job; the known Secret value appears nowhere", n)
}
