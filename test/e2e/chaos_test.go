//go:build e2e && chaos

package e2e

// make chaos: faults injected on the live cluster while real calls run. Each scenario is a subtest of
// TestChaos; scripts/chaos.sh prints one PASS or FAIL line per scenario. A scenario passes when nothing
// unsafe was admitted, every call ended with a result or one clear line of error, nothing was left behind
// (sandbox Jobs and Pods, Vault-minted ServiceAccounts and Roles) and the next call works.
//
// No scenario can break the next one: each starts by checking that the cluster is healthy (every local
// component running, the API server's /readyz, the node Ready, the webhook's replicas ready, Vault unsealed
// and configured), repairing it (scripts/up.sh, then `vault configure`) or stopping with one line when it is
// not, and ends, whatever happened to it, by checking again and repairing what it left broken. Faults are
// injected with bounds the components honour (a SIGTERM escalated to SIGKILL after stopGrace) and cleared by
// waiting for readiness, never for a fixed time.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/audit"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/service"
	"github.com/agent-sandbox/agent-sandbox/mcp"
	"github.com/agent-sandbox/agent-sandbox/test/corpus"
	"github.com/agent-sandbox/agent-sandbox/test/demo"
)

type chaos struct {
	t     *testing.T
	cfg   demo.Config
	cs    kubernetes.Interface
	p     *policy.Compiled
	ns    string
	state string // the local cluster's state folder ($AS_STATE)
	up    string // the command that (re)starts stopped local components
	// repair starts what is not running (up.sh) and configures Vault again (a restarted dev server has
	// forgotten its configuration); it changes nothing on a healthy cluster.
	repair string
	// before holds the call Jobs that existed when the scenario began: not the scenario's own.
	before map[string]bool
	// started is when the scenario began (scenario): the window of its calls' audit anchors.
	started time.Time
	// ended is when the scenario before this one ended (its cleanup began): after its last call.
	ended time.Time
}

// scenarioGap is how long after the scenario before a scenario begins. corpus.AuditAgainstCluster's window
// reaches 2 s and a rounding (--since takes whole seconds) before started, so as not to miss a call of the
// scenario's own; a call the scenario before made just before it ended would fall inside that window and
// count as missing from this scenario's log.
const scenarioGap = 4 * time.Second

// server is one MCP server process and a client session with it.
type server struct {
	client *mcp.Client
	cmd    *exec.Cmd
}

func (c *chaos) start(ctx context.Context, cfg demo.Config, extra ...string) *server {
	c.t.Helper()
	args := append([]string{"mcp", "--policy", cfg.Policy, "--kubeconfig", cfg.MCPKubeconfig,
		"--workspaces", cfg.Workspaces, "--db", cfg.DB, "--audit-log", cfg.AuditLog}, extra...)
	cmd := exec.CommandContext(ctx, cfg.Binary, args...)
	client, err := mcp.DialCommand(ctx, cmd)
	if err != nil {
		c.t.Fatalf("start the MCP server: %v", err)
	}
	return &server{client: client, cmd: cmd}
}

// planPending plans the demo workspace on s and asks to apply it: the apply waits for an approval. It
// returns the plan, the apply's arguments and the pending answer.
func (s *server) planPending(ctx context.Context, t *testing.T) (service.PlanOutput, map[string]any, service.ApplyOutput) {
	t.Helper()
	var plan service.PlanOutput
	res, err := s.client.Call(ctx, "terraform_plan", map[string]any{"workspace": "k8s-demo"})
	if err != nil || res.IsError {
		t.Fatalf("terraform_plan: %v %+v", err, res)
	}
	if err := res.Decode(&plan); err != nil {
		t.Fatal(err)
	}
	args := map[string]any{"workspace": "k8s-demo", "plan_id": plan.PlanID}
	if res, err = s.client.Call(ctx, "terraform_apply", args); err != nil {
		t.Fatal(err)
	}
	var pending service.ApplyOutput
	if err := res.Decode(&pending); err != nil || pending.Status != service.StatusApprovalRequired {
		t.Fatalf("terraform_apply without approval: %v %+v", err, pending)
	}
	return plan, args, pending
}

func (s *server) kill() {
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	_ = s.client.Close()
}

func TestChaos(t *testing.T) {
	cfg := config(t)
	p := livePolicy(t, cfg)
	c := &chaos{t: t, cfg: cfg, cs: admin(t, cfg.AdminKubeconfig), p: p, ns: p.Spec.Sandbox.Namespace,
		state: env(t, "E2E_STATE"), up: env(t, "E2E_UP"), repair: env(t, "E2E_VAULT_RESTART")}
	t.Run("webhook replica killed during 20 calls", c.webhookReplicaKilled)
	t.Run("Vault restarted during a call", c.vaultRestarted)
	t.Run("kube-apiserver restarted during a call", func(t *testing.T) { c.apiserverRestarted(t, 0, false) })
	t.Run("kube-apiserver down for 90 s while a call waits for its Pod", func(t *testing.T) { c.apiserverRestarted(t, apiserverDownFor(t), true) })
	t.Run("MCP server killed between plan and apply", c.serverKilledBeforeApply)
	t.Run("MCP server killed during a run", c.serverKilledDuringRun)
	t.Run("audit disk full", c.auditDiskFull)
	t.Run("approval expires while its apply is queued", c.approvalExpiresQueued)
	t.Run("webhook down during an approved apply", c.webhookDownDuringApply)
}

// oneLineError checks that a failed call says why in one line.
func oneLineError(t *testing.T, what string, res *mcp.Result) {
	t.Helper()
	if !res.IsError {
		return
	}
	if strings.TrimSpace(res.Text) == "" || strings.Contains(strings.TrimSpace(res.Text), "\n") {
		t.Errorf("%s failed without one clear line: %q", what, res.Text)
	}
}

// callJobs lists the call Jobs (sandbox.CallJobs) that were not there when the scenario began.
func (c *chaos) callJobs(ctx context.Context) []string {
	all, err := sandbox.CallJobs(ctx, c.cs, c.ns)
	if err != nil {
		c.t.Fatalf("list the call Jobs: %v", err)
	}
	var out []string
	for _, j := range all {
		if !c.before[j] {
			out = append(out, j)
		}
	}
	return out
}

// begin starts a scenario on a healthy cluster (repaired first if it is not; the scenario stops with one
// line if it cannot be) and makes sure it ends on one: whatever the scenario does or fails to do, the
// cluster is checked again when it ends and repaired if needed. The call Jobs that exist now are not the
// scenario's own.
func (c *chaos) begin(t *testing.T) {
	c.t, c.before = t, nil
	if bad := c.waitHealthy(20 * time.Second); bad != "" {
		t.Logf("the cluster is unhealthy before this scenario (%s): repairing it", bad)
		if bad := c.doRepair(t); bad != "" {
			t.Fatalf("the cluster is unhealthy and the repair did not fix it: %s", bad)
		}
		t.Logf("repaired: the cluster is healthy")
	}
	t.Cleanup(func() {
		defer c.removeLeftovers(t)
		if bad := c.waitHealthy(time.Minute); bad != "" {
			t.Errorf("the scenario left the cluster unhealthy (%s): repairing it", bad)
			if bad := c.doRepair(t); bad != "" {
				t.Errorf("the repair did not fix the cluster: %s", bad)
			} else {
				t.Logf("repaired: the cluster is healthy")
			}
		}
	})
	before := map[string]bool{}
	for _, j := range c.callJobs(context.Background()) {
		before[j] = true
	}
	if len(before) > 0 {
		t.Logf("call Jobs from before this scenario (not counted): %v", before)
	}
	c.before = before
}

// removeLeftovers deletes the call Jobs a scenario left behind (a failed one: a passing one has checked that
// there are none), after the cluster was repaired, so that they do not linger for their TTL.
func (c *chaos) removeLeftovers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	all, err := sandbox.CallJobs(ctx, c.cs, c.ns)
	if err != nil {
		return
	}
	for _, j := range all {
		if c.before[j] {
			continue
		}
		err := c.cs.BatchV1().Jobs(c.ns).Delete(ctx, j, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
		t.Logf("deleted the call Job %s this scenario left behind (err=%v)", j, err)
	}
}

// components are the local cluster's processes, as scripts/up.sh starts them, each with its pid file.
var components = []string{"etcd", "kube-apiserver", "containerd", "kube-controller-manager", "kube-scheduler",
	"kubelet", "kube-network-policies", "vault"}

// pidOf is the process id in a component's pid file, 0 if there is none.
func (c *chaos) pidOf(name string) int {
	b, err := os.ReadFile(filepath.Join(c.state, "run", name+".pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// running reports whether pid is a live process (a zombie is not).
func running(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) STATE ...; comm may hold spaces and parentheses, so read after the last ')'.
	rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:])
	return !strings.HasPrefix(strings.TrimSpace(rest), "Z")
}

// health says what is wrong with the cluster, in one line; "" when it is fit for a scenario.
func (c *chaos) health() string {
	var bad []string
	for _, name := range components {
		if !running(c.pidOf(name)) {
			bad = append(bad, name+" is not running")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if out, err := c.cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil || string(out) != "ok" {
		bad = append(bad, "the API server is not ready")
		return strings.Join(bad, "; ")
	}
	nodes, err := c.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) == 0 {
		bad = append(bad, "no node")
	}
	if err == nil {
		for _, n := range nodes.Items {
			ready := false
			for _, cond := range n.Status.Conditions {
				ready = ready || (cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue)
			}
			if !ready {
				bad = append(bad, "node "+n.Name+" is not Ready")
			}
		}
	}
	if d, err := c.cs.AppsV1().Deployments(releaseNS).Get(ctx, "agent-sandbox-webhook", metav1.GetOptions{}); err != nil {
		bad = append(bad, "no webhook Deployment")
	} else if want := ptr.Deref(d.Spec.Replicas, 1); d.Status.ReadyReplicas < want || d.Status.UpdatedReplicas < want {
		bad = append(bad, fmt.Sprintf("webhook replicas ready %d of %d", d.Status.ReadyReplicas, want))
	} else if n := c.readyEndpoints(ctx, d.Name); n < int(want) {
		// What admission uses: the Service's ready endpoints. After a long API server outage the Deployment
		// still counts its replicas ready while the endpoints are being rebuilt.
		bad = append(bad, fmt.Sprintf("webhook Service ready endpoints %d of %d", n, want))
	}
	if why := c.vaultHealth(ctx); why != "" {
		bad = append(bad, why)
	}
	return strings.Join(bad, "; ")
}

// readyEndpoints counts the ready endpoints of a Service of the release namespace.
func (c *chaos) readyEndpoints(ctx context.Context, service string) int {
	slices, err := c.cs.DiscoveryV1().EndpointSlices(releaseNS).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service})
	if err != nil {
		return 0
	}
	n := 0
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			if ptr.Deref(e.Conditions.Ready, false) && !ptr.Deref(e.Conditions.Terminating, false) {
				n++
			}
		}
	}
	return n
}

// vaultHealth says what is wrong with Vault: not answering, sealed, or not configured (a dev server keeps
// its configuration in memory; a restarted one has no Kubernetes auth until `vault configure` runs again).
func (c *chaos) vaultHealth(ctx context.Context) string {
	get := func(path string, token string) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:8200"+path, nil)
		if err != nil {
			return nil, err
		}
		if token != "" {
			req.Header.Set("X-Vault-Token", token)
		}
		return http.DefaultClient.Do(req)
	}
	resp, err := get("/v1/sys/health", "")
	if err != nil {
		return "Vault does not answer"
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Sprintf("Vault is not active and unsealed (sys/health %d)", resp.StatusCode)
	}
	token, err := os.ReadFile(filepath.Join(c.state, "vault", "root-token"))
	if err != nil {
		return "no Vault root token"
	}
	resp, err = get("/v1/sys/auth", strings.TrimSpace(string(token)))
	if err != nil {
		return "Vault does not answer"
	}
	defer resp.Body.Close()
	var mounts struct {
		Data map[string]struct {
			Type string `json:"type"`
		} `json:"data"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&mounts) != nil {
		return fmt.Sprintf("Vault's auth mounts cannot be read (%d)", resp.StatusCode)
	}
	for _, m := range mounts.Data {
		if m.Type == "kubernetes" {
			return ""
		}
	}
	return "Vault has no Kubernetes auth (not configured)"
}

// waitHealthy waits up to limit for the cluster to be healthy; it returns what is still wrong ("" when
// healthy).
func (c *chaos) waitHealthy(limit time.Duration) string {
	deadline := time.Now().Add(limit)
	for {
		bad := c.health()
		if bad == "" || time.Now().After(deadline) {
			return bad
		}
		time.Sleep(time.Second)
	}
}

// doRepair runs the repair command (up.sh starts what is not running and waits for each component's
// readiness; then Vault is configured again) and waits up to two minutes for the cluster to be healthy.
// It returns what is still wrong ("" when healthy).
func (c *chaos) doRepair(t *testing.T) string {
	start := time.Now()
	out, err := exec.Command("sh", "-c", c.repair).CombinedOutput()
	if err != nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		return fmt.Sprintf("the repair command failed (%v): %s", err, lines[len(lines)-1])
	}
	bad := c.waitHealthy(2 * time.Minute)
	t.Logf("repair took %s", time.Since(start).Round(100*time.Millisecond))
	return bad
}

// stopGrace is how long a component stopped with SIGTERM may take to exit before it gets SIGKILL. The API
// server, with up.sh's shutdown flags, exits within about ten seconds; without them it may wait 60 s for
// its long-running requests (log follows). Past stopGrace nothing it waits for matters to a scenario.
const stopGrace = 30 * time.Second

// stop ends a local component: SIGTERM, then SIGKILL if it is still there after stopGrace; it returns once
// the process is gone, saying how.
func (c *chaos) stop(name string) error {
	pid := c.pidOf(name)
	if !running(pid) {
		return fmt.Errorf("%s is not running (pid file says %d)", name, pid)
	}
	start := time.Now()
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return fmt.Errorf("SIGTERM %s (pid %d): %w", name, pid, err)
	}
	how := "exited on SIGTERM"
	for running(pid) && time.Since(start) < stopGrace {
		time.Sleep(100 * time.Millisecond)
	}
	if running(pid) {
		how = fmt.Sprintf("still running %s after SIGTERM: killed", stopGrace)
		_ = syscall.Kill(pid, syscall.SIGKILL)
		for i := 0; running(pid) && i < 100; i++ {
			time.Sleep(100 * time.Millisecond)
		}
		if running(pid) {
			return fmt.Errorf("%s (pid %d) survived SIGKILL", name, pid)
		}
	}
	// Exiting is not gone: until the process is reaped its pid still answers kill -0, and up.sh, which asks
	// just that, would take it for the running component and wait for it.
	for i := 0; syscall.Kill(pid, 0) == nil; i++ {
		if i == 100 {
			return fmt.Errorf("%s (pid %d) exited but was not reaped within 10 s", name, pid)
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.t.Logf("%s (pid %d) %s, after %s", name, pid, how, time.Since(start).Round(100*time.Millisecond))
	return nil
}

// vaultMinted lists the ServiceAccounts, Roles and RoleBindings Vault minted in demo-app since since.
func (c *chaos) vaultMinted(ctx context.Context, since time.Time) []string {
	var out []string
	keep := func(kind string, m metav1.ObjectMeta) {
		if strings.HasPrefix(m.Name, "v-as-") && !m.CreationTimestamp.Time.Before(since.Truncate(time.Second)) {
			out = append(out, kind+"/"+m.Name)
		}
	}
	if l, err := c.cs.CoreV1().ServiceAccounts("demo-app").List(ctx, metav1.ListOptions{}); err == nil {
		for _, o := range l.Items {
			keep("serviceaccount", o.ObjectMeta)
		}
	}
	if l, err := c.cs.RbacV1().Roles("demo-app").List(ctx, metav1.ListOptions{}); err == nil {
		for _, o := range l.Items {
			keep("role", o.ObjectMeta)
		}
	}
	if l, err := c.cs.RbacV1().RoleBindings("demo-app").List(ctx, metav1.ListOptions{}); err == nil {
		for _, o := range l.Items {
			keep("rolebinding", o.ObjectMeta)
		}
	}
	return out
}

// nothingLeft waits up to a minute for every call Job and every Vault-minted object since since to be
// gone, and fails the test naming what stayed.
func (c *chaos) nothingLeft(ctx context.Context, since time.Time) {
	c.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		jobs, minted := c.callJobs(ctx), c.vaultMinted(ctx, since)
		if len(jobs) == 0 && len(minted) == 0 {
			return
		}
		if time.Now().After(deadline) {
			c.t.Errorf("left behind after a minute: Jobs %v, Vault-minted %v", jobs, minted)
			return
		}
		time.Sleep(time.Second)
	}
}

// waitForCallJob returns the name of the first call Job that appears.
func (c *chaos) waitForCallJob(ctx context.Context) (string, error) {
	for ctx.Err() == nil {
		if jobs := c.callJobs(ctx); len(jobs) > 0 {
			return jobs[0], nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "", ctx.Err()
}

// works checks that a k8s_get_pod_status call succeeds on s.
func (c *chaos) works(ctx context.Context, s *server, what string) {
	c.t.Helper()
	res, err := s.client.Call(ctx, "k8s_get_pod_status", map[string]any{"namespace": "demo-app"})
	if err != nil {
		c.t.Fatalf("%s: %v", what, err)
	}
	if res.IsError {
		c.t.Errorf("%s: the next call failed: %s", what, res.Text)
	}
}

// auditChain checks the log's hash chain (audit verify).
func (c *chaos) auditChain(ctx context.Context, path string) {
	c.t.Helper()
	out, err := exec.CommandContext(ctx, c.cfg.Binary, "audit", "verify", "--file", path).CombinedOutput()
	if err != nil {
		c.t.Errorf("audit verify: %v: %s", err, out)
	}
}

// auditVerify checks the log's chain, then holds it against the cluster's anchors of the calls admitted
// since the scenario began (audit verify --against-cluster, with the admin kubeconfig): whatever the fault,
// every call the scenario's servers made is anchored and complete in the log — a call a killed server left
// open included, once the next server closed it.
func (c *chaos) auditVerify(ctx context.Context, path string) {
	c.t.Helper()
	c.auditChain(ctx, path)
	summary, err := corpus.AuditAgainstCluster(ctx, c.cfg.Binary, c.cfg.AdminKubeconfig, c.started, []string{path})
	if err != nil {
		c.t.Errorf("%v", err)
		return
	}
	c.t.Logf("audit verify --against-cluster: %s", summary)
}

// auditVerifySettled is auditVerify for a scenario that may leave a warm claim admitted and anchored but
// never stored (a webhook replica killed between the two). The warm pool voids such an anchor once the
// claimed Pod shows the claim's fate — at the latest when it evicts the Pod left unclaimed, 30 s after the
// claim — and, when the killed replica led the pool, once another replica holds the pool's Lease. Until
// then the anchor is in progress, so the check is repeated until it passes or within has passed; its last
// result counts.
func (c *chaos) auditVerifySettled(ctx context.Context, path string, within time.Duration) {
	c.t.Helper()
	c.auditChain(ctx, path)
	deadline := time.Now().Add(within)
	for {
		summary, err := corpus.AuditAgainstCluster(ctx, c.cfg.Binary, c.cfg.AdminKubeconfig, c.started, []string{path})
		if err == nil {
			c.t.Logf("audit verify --against-cluster: %s", summary)
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			c.t.Errorf("%v", err)
			return
		}
		c.t.Logf("audit verify --against-cluster, not settled yet: %v", err)
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
		}
	}
}

// scenario begins a scenario (begin) with a context of timeout, the time it starts and its own approvals
// database and audit log.
func (c *chaos) scenario(t *testing.T, timeout time.Duration) (context.Context, time.Time, demo.Config) {
	c.begin(t)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	if wait := scenarioGap - time.Since(c.ended); wait > 0 {
		time.Sleep(wait)
	}
	c.started = time.Now()
	t.Cleanup(func() { c.ended = time.Now() })
	return ctx, c.started, c.fresh()
}

// fresh gives the scenario its own approvals database and audit log.
func (c *chaos) fresh() demo.Config {
	cfg := c.cfg
	dir := c.t.TempDir()
	cfg.DB, cfg.AuditLog = filepath.Join(dir, "approvals.db"), filepath.Join(dir, "audit.jsonl")
	return cfg
}

func (c *chaos) webhookReplicaKilled(t *testing.T) {
	ctx, since, cfg := c.scenario(t, 8*time.Minute)
	s := c.start(ctx, cfg)
	defer s.kill()

	dep, err := c.cs.AppsV1().Deployments(releaseNS).Get(ctx, "agent-sandbox-webhook", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sel := labels.SelectorFromSet(dep.Spec.Selector.MatchLabels).String()

	// An attacker keeps submitting an unsafe Job (host network) straight to the API server throughout.
	var unsafeTried, unsafeAdmitted atomic.Int64
	attackCtx, stopAttack := context.WithCancel(ctx)
	var attack sync.WaitGroup
	attack.Add(1)
	go func() {
		defer attack.Done()
		tool, _ := c.p.Tool("k8s_get_pod_status")
		for attackCtx.Err() == nil {
			inv, _ := tool.Invoke(map[string]any{"namespace": "demo-app"})
			id, _ := approval.NewRequestID()
			// A well-formed audit head, so that the Job is refused for its host network and nothing else.
			job, err := sandbox.RenderJob(c.p, sandbox.JobSpec{Invocation: inv, RequestID: id, AuditHead: corpus.AuditHead})
			if err == nil {
				job.Spec.Template.Spec.HostNetwork = true
				unsafeTried.Add(1)
				if created, err := c.cs.BatchV1().Jobs(c.ns).Create(attackCtx, job, metav1.CreateOptions{}); err == nil {
					unsafeAdmitted.Add(1)
					_ = c.cs.BatchV1().Jobs(c.ns).Delete(context.Background(), created.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()

	const calls, workers = 20, 4
	var done atomic.Int64
	var killed atomic.Bool
	results := make(chan *mcp.Result, calls)
	work := make(chan int, calls)
	for i := 0; i < calls; i++ {
		work <- i
	}
	close(work)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range work {
				res, err := s.client.Call(ctx, "k8s_get_pod_status", map[string]any{"namespace": "demo-app"})
				if err != nil {
					res = &mcp.Result{IsError: true, Text: "protocol error: " + err.Error()}
				}
				results <- res
				if done.Add(1) == 3 && killed.CompareAndSwap(false, true) {
					pods, err := c.cs.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{LabelSelector: sel})
					if err == nil && len(pods.Items) > 0 {
						victim := pods.Items[0].Name
						_ = c.cs.CoreV1().Pods(releaseNS).Delete(ctx, victim, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))})
						t.Logf("killed webhook Pod %s after 3 calls", victim)
					}
				}
			}
		}()
	}
	wg.Wait()
	close(results)
	stopAttack()
	attack.Wait()
	ok, failed := 0, 0
	for res := range results {
		if res.IsError {
			failed++
			oneLineError(t, "a call", res)
			t.Logf("failed call: %s", res.Text)
		} else {
			ok++
		}
	}
	t.Logf("20 calls: %d succeeded, %d failed clearly; unsafe Jobs submitted %d, admitted %d", ok, failed, unsafeTried.Load(), unsafeAdmitted.Load())
	if !killed.Load() {
		t.Error("no webhook Pod was killed")
	}
	if unsafeAdmitted.Load() != 0 || unsafeTried.Load() == 0 {
		t.Errorf("unsafe Jobs admitted: %d of %d", unsafeAdmitted.Load(), unsafeTried.Load())
	}
	if ok+failed != calls {
		t.Errorf("%d of %d calls ended", ok+failed, calls)
	}
	if ok < calls/2 {
		t.Errorf("only %d of %d calls succeeded with one replica left", ok, calls)
	}
	c.nothingLeft(ctx, since)
	// The Deployment replaces the killed replica.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		d, err := c.cs.AppsV1().Deployments(releaseNS).Get(ctx, dep.Name, metav1.GetOptions{})
		if err == nil && d.Status.ReadyReplicas == *d.Spec.Replicas {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the webhook Deployment did not get its replicas back")
		}
		time.Sleep(time.Second)
	}
	// A replica killed after admitting a warm claim and recording its anchor, but before the API server
	// stored the claim, leaves an anchor of a warm Job that never served the call, which the server then ran
	// elsewhere (docs/design/audit-anchors.md, "A claim admitted but never stored"): the warm pool voids it,
	// and verification reports it as VOID, not as a call cut from the log.
	c.auditVerifySettled(ctx, cfg.AuditLog, 2*time.Minute)
}

// faultDuringCall starts a cold k8s_get_pod_status call, injects fault as soon as its Job exists, waits
// for the call's result and lets repair run. It returns the call's result.
func (c *chaos) faultDuringCall(ctx context.Context, s *server, fault, repair func() error) *mcp.Result {
	c.t.Helper()
	type outcome struct {
		res *mcp.Result
		err error
	}
	got := make(chan outcome, 1)
	go func() {
		res, err := s.client.Call(ctx, "k8s_get_pod_status", map[string]any{"namespace": "demo-app"})
		got <- outcome{res, err}
	}()
	jctx, cancel := context.WithTimeout(ctx, time.Minute)
	job, err := c.waitForCallJob(jctx)
	cancel()
	if err != nil {
		c.t.Fatalf("no Job appeared for the call: %v", err)
	}
	pod := "none yet"
	if pods, err := c.cs.CoreV1().Pods(c.ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + job}); err == nil && len(pods.Items) > 0 {
		pod = pods.Items[0].Name + " " + string(pods.Items[0].Status.Phase)
	}
	c.t.Logf("Job %s exists (its Pod: %s): injecting the fault", job, pod)
	if err := fault(); err != nil {
		c.t.Fatalf("inject the fault: %v", err)
	}
	o := <-got
	if err := repair(); err != nil {
		c.t.Fatalf("repair: %v", err)
	}
	if o.err != nil {
		c.t.Fatalf("the call ended with a protocol error: %v", o.err)
	}
	c.t.Logf("the call ended: error=%v %s", o.res.IsError, firstN(o.res.Text, 300))
	oneLineError(c.t, "the call", o.res)
	return o.res
}

func firstN(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func (c *chaos) sh(cmd string) error {
	out, err := exec.Command("sh", "-c", cmd).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", cmd, err, out)
	}
	return nil
}

func (c *chaos) vaultRestarted(t *testing.T) {
	ctx, since, cfg := c.scenario(t, 6*time.Minute)
	s := c.start(ctx, cfg, "--warm=false")
	defer s.kill()
	res := c.faultDuringCall(ctx, s, func() error { return c.stop("vault") }, func() error { return c.sh(c.repair) })
	if !res.IsError {
		t.Logf("the call finished before Vault went away (it had its credential already)")
	}
	c.nothingLeft(ctx, since)
	c.works(ctx, s, "after Vault came back")
	c.auditVerify(ctx, cfg.AuditLog)
}

// apiserverDownFor is how long the long API server scenario keeps it down (E2E_CHAOS_APISERVER_DOWN, a Go
// duration; 90 s by default): well inside the two minutes a call in flight rides out.
func apiserverDownFor(t *testing.T) time.Duration {
	if v := os.Getenv("E2E_CHAOS_APISERVER_DOWN"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("E2E_CHAOS_APISERVER_DOWN=%q: %v", v, err)
		}
		return d
	}
	return 90 * time.Second
}

// apiserverRestarted stops the API server once a cold call's Job exists, keeps it down for down (0: starts it
// again at once) and starts it again with up.sh, which returns once /readyz says ok. The call rides it out:
// it succeeds, its audit chain is complete, nothing is left behind and the next call works.
//
// With holdPods the controller-manager is stopped before the call (up.sh starts it again with the API
// server), so the call's Job has no Pod until the control plane is back: the whole outage falls on the
// runner's side — its reads of the Job and the Pod refused for all of down — and none on the sandbox's,
// whose credential agent gives up logging in to Vault after 20 s without an API server (Vault's
// TokenReview needs one; broker.DefaultLoginTimeout). Without it the outage falls wherever the call is.
//
// CHAOS_BREAK_RESTART=1 leaves the API server down (a forced failure: the scenario fails, the cluster is
// repaired when it ends, and the next scenario passes).
func (c *chaos) apiserverRestarted(t *testing.T, down time.Duration, holdPods bool) {
	ctx, since, cfg := c.scenario(t, 8*time.Minute)
	s := c.start(ctx, cfg, "--warm=false")
	defer s.kill()
	if holdPods {
		if err := c.stop("kube-controller-manager"); err != nil {
			t.Fatal(err)
		}
	}
	var stopped time.Time
	stop := func() error {
		err := c.stop("kube-apiserver")
		stopped = time.Now()
		return err
	}
	restart := func() error {
		if os.Getenv("CHAOS_BREAK_RESTART") == "1" {
			t.Logf("CHAOS_BREAK_RESTART=1: the API server is left down")
			return nil
		}
		if wait := down - time.Since(stopped); wait > 0 {
			time.Sleep(wait)
		}
		start := time.Now()
		if out, err := exec.Command("sh", "-c", c.up).CombinedOutput(); err != nil {
			return fmt.Errorf("up.sh: %v: %s", err, lastLines(string(out), 5))
		}
		t.Logf("the API server was down %s; up.sh took %s to have it ready", time.Since(stopped).Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond))
		return nil
	}
	// The call is still running when the API server is down: its result comes once it is back, so the
	// restart runs beside the call, not after it.
	restarted := make(chan error, 1)
	res := c.faultDuringCall(ctx, s, func() error {
		if err := stop(); err != nil {
			return err
		}
		go func() { restarted <- restart() }()
		return nil
	}, func() error { return <-restarted })
	if res.IsError {
		t.Errorf("the call did not ride out the API server's restart: %s", firstN(res.Text, 300))
	}
	c.chainComplete(cfg.AuditLog)
	c.nothingLeft(ctx, since)
	c.works(ctx, s, "after the API server came back")
	c.auditVerify(ctx, cfg.AuditLog)
}

// chainComplete checks that every call in the audit log has its whole chain, in order: tool.request,
// guardrail.decision, sandbox.started, credential.issued, sandbox.completed, credential.revoked,
// tool.result.
func (c *chaos) chainComplete(path string) {
	c.t.Helper()
	recs, err := audit.ReadFile(path, audit.Filter{})
	if err != nil {
		c.t.Fatalf("read the audit log: %v", err)
	}
	byCall := map[string][]string{}
	var order []string
	for _, r := range recs {
		if r.RequestID == "" {
			continue
		}
		if _, ok := byCall[r.RequestID]; !ok {
			order = append(order, r.RequestID)
		}
		byCall[r.RequestID] = append(byCall[r.RequestID], r.Event)
	}
	want := []string{audit.EventToolRequest, audit.EventGuardrailDecision, audit.EventSandboxStarted, audit.EventCredentialIssued,
		audit.EventSandboxCompleted, audit.EventCredentialRevoked, audit.EventToolResult}
	for _, id := range order {
		got, i := byCall[id], 0
		for _, ev := range got {
			if i < len(want) && ev == want[i] {
				i++
			}
		}
		if i < len(want) {
			c.t.Errorf("call %s: audit chain %v lacks %s", id, got, want[i])
		}
	}
	if len(order) == 0 {
		c.t.Error("no call in the audit log")
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

func (c *chaos) serverKilledBeforeApply(t *testing.T) {
	ctx, since, cfg := c.scenario(t, 8*time.Minute)
	s1 := c.start(ctx, cfg)
	plan, args, pending := s1.planPending(ctx, t)
	s1.kill()
	t.Logf("killed the MCP server with %s pending", pending.ApprovalRequest)

	out, err := exec.CommandContext(ctx, cfg.Binary, "approvals", "show", pending.ApprovalRequest, "--db", cfg.DB, "-o", "json").Output()
	if err != nil {
		t.Fatalf("approvals show after the kill: %v", err)
	}
	var shown map[string]any
	if err := json.Unmarshal(out, &shown); err != nil {
		t.Fatalf("approvals show -o json: %v: %s", err, out)
	}
	summary := fmt.Sprint(shown["plan_summary"])
	if summary == "" || strings.Contains(summary, "no record") || !strings.Contains(summary, plan.PlanID[:12]) {
		t.Errorf("after the restart the pending approval does not show its real summary: %q", summary)
	}
	if _, err := demo.Approve(ctx, cfg, pending.ApprovalRequest); err != nil {
		t.Fatal(err)
	}
	s2 := c.start(ctx, cfg)
	defer s2.kill()
	res, err := s2.client.Call(ctx, "terraform_apply", args)
	if err != nil {
		t.Fatal(err)
	}
	var applied service.ApplyOutput
	if err := res.Decode(&applied); err != nil || applied.Status != service.StatusApplied {
		t.Fatalf("terraform_apply on the restarted server: %v %+v %s", err, applied, res.Text)
	}
	c.nothingLeft(ctx, since)
	c.auditVerify(ctx, cfg.AuditLog)
}

func (c *chaos) serverKilledDuringRun(t *testing.T) {
	ctx, since, cfg := c.scenario(t, 6*time.Minute)
	s1 := c.start(ctx, cfg, "--warm=false")
	go func() { _, _ = s1.client.Call(ctx, "k8s_get_pod_status", map[string]any{"namespace": "demo-app"}) }()
	jctx, jcancel := context.WithTimeout(ctx, time.Minute)
	job, err := c.waitForCallJob(jctx)
	jcancel()
	if err != nil {
		t.Fatal(err)
	}
	s1.kill()
	t.Logf("killed the MCP server while Job %s ran", job)

	s2 := c.start(ctx, cfg, "--warm=false")
	defer s2.kill()
	// The new server closes the dead one's call: Job deleted, chain completed.
	deadline := time.Now().Add(time.Minute)
	var abandoned *audit.Record
	for abandoned == nil && time.Now().Before(deadline) {
		recs, _ := audit.ReadFile(cfg.AuditLog, audit.Filter{})
		for i := range recs {
			if recs[i].Event == audit.EventToolResult && recs[i].Fields["abandoned"] == true {
				abandoned = &recs[i]
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	if abandoned == nil {
		t.Fatal("the restarted server did not close the abandoned call in the audit log")
	}
	t.Logf("closed: %s %v", abandoned.RequestID, abandoned.Fields["jobs_deleted"])
	c.nothingLeft(ctx, since)
	c.auditVerify(ctx, cfg.AuditLog)
	c.works(ctx, s2, "on the restarted server")
}

func (c *chaos) auditDiskFull(t *testing.T) {
	ctx, since, cfg := c.scenario(t, 5*time.Minute)
	dir := t.TempDir()
	if err := c.sh("mount -t tmpfs -o size=8m agent-sandbox-chaos " + dir); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.sh("umount " + dir) }()
	cfg.AuditLog = filepath.Join(dir, "audit.jsonl")
	s := c.start(ctx, cfg, "--warm=false")
	defer s.kill()
	c.works(ctx, s, "before the disk fills")

	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	f.Close()
	before := len(c.callJobs(ctx))
	res, err := s.client.Call(ctx, "k8s_get_pod_status", map[string]any{"namespace": "demo-app"})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.Contains(res.Text, "audit log cannot be written") {
		t.Errorf("with the audit disk full the call was not refused: %+v", res)
	}
	oneLineError(t, "the refused call", res)
	if n := len(c.callJobs(ctx)); n > before {
		t.Errorf("a Job was created for a call that could not be recorded")
	}
	c.auditChain(ctx, cfg.AuditLog) // no call was admitted yet: nothing to hold against the cluster
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	c.works(ctx, s, "after space was freed")
	c.auditVerify(ctx, cfg.AuditLog)
	c.nothingLeft(ctx, since)
}

func (c *chaos) approvalExpiresQueued(t *testing.T) {
	ctx, since, cfg := c.scenario(t, 8*time.Minute)
	// One sandbox at a time, so the apply waits behind a slow call.
	s := c.start(ctx, cfg, "--max-concurrency=1", "--warm=false")
	defer s.kill()
	_, args, pending := s.planPending(ctx, t)
	dep := demoDeployment(t, ctx, c.cs)
	// A slow call takes the only slot; the apply queues behind it while its 8-second approval expires. The
	// slow call is held, not merely slow: with the scheduler stopped its Pod stays Pending until the approval
	// has expired (a plan that happened to take longer than 8 s raced the machine's speed).
	if err := c.stop("kube-scheduler"); err != nil {
		t.Fatal(err)
	}
	const ttl = 8 * time.Second
	if _, err := demo.Approve(ctx, cfg, pending.ApprovalRequest, "--ttl="+ttl.String()); err != nil {
		t.Fatal(err)
	}
	expires := time.Now().Add(ttl)
	slow := make(chan *mcp.Result, 1)
	go func() {
		r, _ := s.client.Call(ctx, "terraform_plan", map[string]any{"workspace": "k8s-demo"})
		slow <- r
	}()
	slowJob, err := c.waitForCallJob(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the slow call's Job %s holds the only slot", slowJob)
	start := time.Now()
	type outcome struct {
		res *mcp.Result
		err error
	}
	applyDone := make(chan outcome, 1)
	go func() {
		r, err := s.client.Call(ctx, "terraform_apply", args)
		applyDone <- outcome{r, err}
	}()
	time.Sleep(time.Until(expires) + 2*time.Second)
	if out, err := exec.Command("sh", "-c", c.up).CombinedOutput(); err != nil {
		t.Fatalf("start the scheduler again: up.sh: %v: %s", err, lastLines(string(out), 5))
	}
	t.Logf("the approval expired %s ago; the scheduler is back", time.Since(expires).Round(100*time.Millisecond))
	o := <-applyDone
	res, err := o.res, o.err
	if err != nil {
		t.Fatal(err)
	}
	<-slow
	t.Logf("apply after %s in the queue: error=%v %s", time.Since(start).Round(time.Millisecond), res.IsError, firstN(res.Text, 300))
	if time.Since(start) < 8*time.Second {
		t.Logf("note: the apply did not wait 8 s in the queue")
	}
	var applied service.ApplyOutput
	_ = res.Decode(&applied)
	if !res.IsError && applied.Status == service.StatusApplied {
		t.Fatalf("an apply ran on an expired approval")
	}
	if !strings.Contains(strings.ToLower(res.Text+applied.Message+string(applied.Status)), "expire") {
		t.Errorf("the refusal does not say the approval expired: %q %+v", res.Text, applied)
	}
	oneLineError(t, "the expired apply", res)
	after, err := c.cs.AppsV1().Deployments("demo-app").Get(ctx, "web", metav1.GetOptions{})
	if err != nil || after.UID != dep.UID || after.Generation != dep.Generation {
		t.Errorf("the Deployment changed under an expired approval")
	}
	c.nothingLeft(ctx, since)
	c.auditVerify(ctx, cfg.AuditLog)
}

// webhookDownDuringApply: every webhook replica is gone (scaled to zero: an upgrade gone wrong) when an
// approved apply is made. The API server refuses the call's objects at admission (failurePolicy Fail) before
// the webhook could record the approval's token, so the call fails with one clear line saying the approval
// stays granted, nothing is applied, the approval is still granted in the store, and once the webhook is back
// the same call applies with it. Before, the store had consumed the grant and the human had to approve again.
func (c *chaos) webhookDownDuringApply(t *testing.T) {
	ctx, since, cfg := c.scenario(t, 8*time.Minute)
	s := c.start(ctx, cfg, "--warm=false")
	defer s.kill()
	_, args, pending := s.planPending(ctx, t)
	if _, err := demo.Approve(ctx, cfg, pending.ApprovalRequest); err != nil {
		t.Fatal(err)
	}
	dep := demoDeployment(t, ctx, c.cs)

	scale, err := c.cs.AppsV1().Deployments(releaseNS).GetScale(ctx, "agent-sandbox-webhook", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	replicas := scale.Spec.Replicas
	setReplicas := func(n int32) error {
		sc, err := c.cs.AppsV1().Deployments(releaseNS).GetScale(context.Background(), "agent-sandbox-webhook", metav1.GetOptions{})
		if err != nil {
			return err
		}
		sc.Spec.Replicas = n
		_, err = c.cs.AppsV1().Deployments(releaseNS).UpdateScale(context.Background(), "agent-sandbox-webhook", sc, metav1.UpdateOptions{})
		return err
	}
	restored := false
	defer func() {
		if !restored {
			_ = setReplicas(replicas)
		}
	}()
	if err := setReplicas(0); err != nil {
		t.Fatal(err)
	}
	for c.readyEndpoints(ctx, "agent-sandbox-webhook") > 0 {
		if ctx.Err() != nil {
			t.Fatal("the webhook's endpoints did not go away")
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("the webhook scaled from %d replicas to 0", replicas)

	res, err := s.client.Call(ctx, "terraform_apply", args)
	if err != nil {
		t.Fatal(err)
	}
	var failed service.ApplyOutput
	_ = res.Decode(&failed)
	t.Logf("apply with the webhook down: error=%v %s", res.IsError, firstN(res.Text, 400))
	if !res.IsError && failed.Status == service.StatusApplied {
		t.Fatal("an apply ran with the webhook down")
	}
	oneLineError(t, "the apply with the webhook down", res)
	if !strings.Contains(res.Text+failed.Message, "stays granted") {
		t.Errorf("the failed apply does not say its approval stays granted: %q %+v", res.Text, failed)
	}
	out, err := exec.CommandContext(ctx, cfg.Binary, "approvals", "show", pending.ApprovalRequest, "--db", cfg.DB, "-o", "json").Output()
	var shown map[string]any
	if err != nil || json.Unmarshal(out, &shown) != nil || shown["status"] != "granted" {
		t.Errorf("after the failed apply the approval is not granted: %v %s", err, out)
	}

	restored = true
	if err := setReplicas(replicas); err != nil {
		t.Fatal(err)
	}
	if bad := c.waitHealthy(3 * time.Minute); bad != "" {
		t.Fatalf("the webhook did not come back: %s", bad)
	}
	after, err := c.cs.AppsV1().Deployments("demo-app").Get(ctx, "web", metav1.GetOptions{})
	if err != nil || after.UID != dep.UID || after.Generation != dep.Generation {
		t.Errorf("the Deployment changed while the webhook was down")
	}
	res, err = s.client.Call(ctx, "terraform_apply", args)
	if err != nil {
		t.Fatal(err)
	}
	var applied service.ApplyOutput
	if err := res.Decode(&applied); err != nil || applied.Status != service.StatusApplied {
		t.Fatalf("the same apply with the webhook back and the same approval: %v %+v %s", err, applied, res.Text)
	}
	c.nothingLeft(ctx, since)
	c.auditVerify(ctx, cfg.AuditLog)
}
