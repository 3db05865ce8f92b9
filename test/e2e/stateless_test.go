//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/audit"
	"github.com/agent-sandbox/agent-sandbox/internal/service"
	"github.com/agent-sandbox/agent-sandbox/mcp"
	"github.com/agent-sandbox/agent-sandbox/test/demo"
	"github.com/agent-sandbox/agent-sandbox/test/harness"
)

// TestE2EStatelessHTTP: two `agent-sandbox mcp --http` processes (stateless, the default) on two ports,
// sharing the approvals database and the audit log as two replicas on one host do, behind one listener
// that sends every request to a replica of its own choosing (tools/call in turn, everything else in turn,
// no session affinity). A 2026-07-28 client (the Go SDK: server/discover, per-request _meta) and then a
// 2025-11-25 client (the Go SDK offering that version: initialize) each play the approval story on the
// live cluster: terraform_plan on one replica, terraform_apply filing the approval on the other, a human
// approving in a terminal, approval_status read on the first, and the approved apply run by the second;
// the used approval is refused when replayed. The audit log (two writers) verifies, and every call's
// chain, with the server that served it, is in it.
func TestE2EStatelessHTTP(t *testing.T) {
	cfg := config(t)
	cs := admin(t, cfg.AdminKubeconfig)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	dep := demoDeployment(t, ctx, cs)
	track := dep.Spec.Selector.MatchLabels["track"]
	dir := t.TempDir()
	c := cfg
	c.Workspaces = filepath.Join(dir, "workspaces")
	c.DB, c.AuditLog = filepath.Join(dir, "approvals.db"), keptAuditLog(t)
	token := strings.Repeat("5a", 24)
	tokenFile := filepath.Join(dir, "http-token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	next := map[string]string{"stable": "canary", "canary": "stable"}
	if next[track] == "" {
		t.Fatalf("the Deployment runs track %q; want stable or canary", track)
	}
	writeDemoWorkspace(t, c.Workspaces, next[track])
	var replicas []*replica
	for i := range 2 {
		r := startReplica(ctx, t, c, tokenFile, i)
		replicas = append(replicas, r)
	}
	lb := newBalancer(t, replicas)
	endpoint := lb.srv.URL + mcp.PathMCP
	t.Logf("replicas %s and %s behind %s", replicas[0].endpoint, replicas[1].endpoint, endpoint)

	var rounds []*round
	for _, version := range []string{mcp.ProtocolVersion20260728, mcp.ProtocolVersion20251125} {
		// Each round flips the track, so that each plan replaces the Deployment the round before left.
		track = next[track]
		writeDemoWorkspace(t, c.Workspaces, track)
		r := playRound(ctx, t, c, lb, endpoint, token, version)
		rounds = append(rounds, r)
		now := demoDeployment(t, ctx, cs)
		if now.UID == dep.UID || now.Spec.Selector.MatchLabels["track"] != track {
			t.Errorf("%s: the Deployment was not replaced by one on track %s (uid %s -> %s)", version, track, dep.UID, now.UID)
		}
		dep = now
	}
	before := len(lb.routed())
	nodeClientOverHTTP(ctx, t, endpoint, token)
	if served := repliesBy(lb.routed()[before:]); served[0] == 0 || served[1] == 0 {
		t.Errorf("the TypeScript SDK client's requests per replica: %v; want both", served)
	}
	for _, r := range replicas {
		r.stop(t)
	}
	checkStatelessAudit(t, c.AuditLog, rounds)
	checkRouted(t, lb.routed())
}

// nodeClientOverHTTP runs the official TypeScript SDK's client (a 2025-11-25 client nobody here wrote)
// through the balancer: tools/list and two read calls, each checked against its output schema by the SDK.
func nodeClientOverHTTP(ctx context.Context, t *testing.T, endpoint, token string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, "node", filepath.Join(env(t, "E2E_NODE_CLIENT"), "client.mjs"), "--http", endpoint)
	calls := `[{"name":"k8s_describe","arguments":{"namespace":"demo-app","kind":"deployment"}}]`
	cmd.Env = append(os.Environ(), "E2E_HTTP_TOKEN="+token, "E2E_CALLS="+calls)
	res, out := runNodeClient(t, "node client over HTTP", cmd)
	if res.IsError || res.ProtocolVersion != mcp.ProtocolVersion20251125 || len(res.Calls) != 1 || res.Calls[0].IsError || !res.Calls[0].Structured {
		t.Errorf("TypeScript SDK client over HTTP: %s", out)
	}
	t.Logf("TypeScript SDK client over HTTP: protocol %s, progress %v", res.ProtocolVersion, res.Progress)
}

// repliesBy counts requests per replica.
func repliesBy(log []routedRequest) map[int]int {
	served := map[int]int{}
	for _, r := range log {
		served[r.Replica]++
	}
	return served
}

// replica is one `agent-sandbox mcp --http` process.
type replica struct {
	cmd      *exec.Cmd
	endpoint string
	log      *harness.SyncBuffer
	exited   chan error
	stopOnce sync.Once
}

var servingLine = regexp.MustCompile(`"msg":"serving MCP over streamable HTTP".*?"endpoint":"([^"]+)"`)

func startReplica(ctx context.Context, t *testing.T, cfg demo.Config, tokenFile string, i int) *replica {
	t.Helper()
	cmd := exec.CommandContext(ctx, cfg.Binary, "mcp", "--http", "127.0.0.1:0", "--http-token-file", tokenFile,
		"--policy", cfg.Policy, "--kubeconfig", cfg.MCPKubeconfig, "--workspaces", cfg.Workspaces,
		"--db", cfg.DB, "--audit-log", cfg.AuditLog)
	r := &replica{cmd: cmd, log: &harness.SyncBuffer{}, exited: make(chan error, 1)}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.stop(t) })
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			r.log.Write([]byte(line + "\n"))
			if m := servingLine.FindStringSubmatch(line); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
		r.exited <- cmd.Wait()
	}()
	select {
	case r.endpoint = <-found:
	case err := <-r.exited:
		r.exited <- err
		t.Fatalf("replica %d exited before serving: %v\n%s", i, err, r.log.String())
	case <-ctx.Done():
		t.Fatalf("replica %d did not start serving\n%s", i, r.log.String())
	}
	return r
}

// stop ends the replica with SIGTERM, as a service manager does, and expects a clean exit.
func (r *replica) stop(t *testing.T) {
	r.stopOnce.Do(func() { r.terminate(t) })
}

func (r *replica) terminate(t *testing.T) {
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-r.exited:
		r.exited <- err
		if err != nil && !strings.Contains(err.Error(), "signal: terminated") {
			t.Errorf("replica %s exited: %v\n%s", r.endpoint, err, r.log.String())
		}
	case <-time.After(30 * time.Second):
		_ = r.cmd.Process.Kill()
		t.Errorf("replica %s did not stop on SIGTERM", r.endpoint)
	}
}

// balancer is the one listener in front of the replicas. It keeps no session: each tools/call goes to
// the next replica in turn, and so does each other request, on a count of its own.
type balancer struct {
	srv     *httptest.Server
	proxies []*httputil.ReverseProxy
	mu      sync.Mutex
	turn    map[bool]int // by "is a tools/call"
	log     []routedRequest
}

// routedRequest is what the balancer saw of one request and which replica it went to.
type routedRequest struct {
	Replica  int
	Verb     string
	Methods  []string
	Tool     string
	Header   string // MCP-Protocol-Version
	Meta     string // _meta["io.modelcontextprotocol/protocolVersion"]
	Session  string // Mcp-Session-Id sent by the client
	Status   int
	Answered string // Mcp-Session-Id the replica answered with
}

func newBalancer(t *testing.T, replicas []*replica) *balancer {
	b := &balancer{turn: map[bool]int{}}
	for _, r := range replicas {
		u, err := url.Parse(r.endpoint)
		if err != nil {
			t.Fatal(err)
		}
		u.Path = ""
		p := httputil.NewSingleHostReverseProxy(u)
		p.FlushInterval = -1 // pass each event of a call's SSE stream (its progress) on at once
		b.proxies = append(b.proxies, p)
	}
	b.srv = httptest.NewServer(b)
	t.Cleanup(b.srv.Close)
	return b
}

func (b *balancer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	rec := routedRequest{Verb: r.Method, Header: r.Header.Get("Mcp-Protocol-Version"), Session: r.Header.Get("Mcp-Session-Id")}
	rec.Methods, rec.Tool, rec.Meta = harness.PeekRPC(body)
	call := len(rec.Methods) == 1 && rec.Methods[0] == "tools/call"
	// Logged before it is passed on: the client may read the whole answer before the proxy returns.
	b.mu.Lock()
	rec.Replica = b.turn[call] % len(b.proxies)
	b.turn[call]++
	i := len(b.log)
	b.log = append(b.log, rec)
	b.mu.Unlock()
	sw := harness.NewStatusRecorder(w)
	b.proxies[rec.Replica].ServeHTTP(sw, r)
	b.mu.Lock()
	b.log[i].Status, b.log[i].Answered = sw.Status, w.Header().Get("Mcp-Session-Id")
	b.mu.Unlock()
}

func (b *balancer) routed() []routedRequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]routedRequest(nil), b.log...)
}

// lastCall is the replica the last tools/call of tool went to.
func (b *balancer) lastCall(tool string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := len(b.log) - 1; i >= 0; i-- {
		if b.log[i].Tool == tool {
			return b.log[i].Replica
		}
	}
	return -1
}

// writeDemoWorkspace writes the repository's demo workspace into dir/k8s-demo with its track set.
func writeDemoWorkspace(t *testing.T, dir, track string) {
	t.Helper()
	src := filepath.Join("..", "..", "terraform", "k8s-demo")
	ws := filepath.Join(dir, "k8s-demo")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(src, "*.tf"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Terraform files in %s: %v", src, err)
	}
	marked := regexp.MustCompile(`(?m)^(\s*track\s*=\s*)"stable"`)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		data = marked.ReplaceAll(data, []byte(`${1}"`+track+`"`))
		if err := os.WriteFile(filepath.Join(ws, filepath.Base(f)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// round is one client's approval story through the balancer.
type round struct {
	version                                string
	plan, pending, status, applied, replay string // request IDs
	planOn, pendingOn, statusOn, appliedOn int    // replicas
	progress                               []string
}

func playRound(ctx context.Context, t *testing.T, cfg demo.Config, lb *balancer, endpoint, token, version string) *round {
	t.Helper()
	start := time.Now()
	client, err := mcp.DialHTTPVersion(ctx, endpoint, token, version)
	if err != nil {
		t.Fatalf("%s client: %v", version, err)
	}
	defer client.Close()
	if got := client.ProtocolVersion(); got != version {
		t.Fatalf("the client offering %s agreed on %q", version, got)
	}
	r := &round{version: version}
	var mu sync.Mutex
	client.OnProgress = func(msg string, _, _ float64) {
		mu.Lock()
		defer mu.Unlock()
		r.progress = append(r.progress, msg)
	}
	call := func(tool string, args map[string]any, out any) (requestID string, on int) {
		t.Helper()
		res, err := client.Call(ctx, tool, args)
		if err != nil {
			t.Fatalf("%s %s: %v", version, tool, err)
		}
		if res.IsError {
			t.Fatalf("%s %s failed: %s", version, tool, res.Text)
		}
		if err := res.Decode(out); err != nil {
			t.Fatalf("%s %s: %v", version, tool, err)
		}
		var id struct {
			RequestID string `json:"request_id"`
		}
		_ = res.Decode(&id)
		return id.RequestID, lb.lastCall(tool)
	}

	var plan service.PlanOutput
	r.plan, r.planOn = call("terraform_plan", map[string]any{"workspace": "k8s-demo"}, &plan)
	if !plan.Destructive || plan.Summary.Replace != 1 {
		t.Fatalf("%s: the plan after the track edit is not one replacement: %+v", version, plan.Summary)
	}
	args := map[string]any{"workspace": "k8s-demo", "plan_id": plan.PlanID}
	var pending service.ApplyOutput
	r.pending, r.pendingOn = call("terraform_apply", args, &pending)
	if pending.Status != service.StatusApprovalRequired {
		t.Fatalf("%s: terraform_apply without an approval: %+v", version, pending)
	}
	transcript, err := demo.Approve(ctx, cfg, pending.ApprovalRequest)
	if err != nil {
		t.Fatalf("%s: approve %s: %v\n%s", version, pending.ApprovalRequest, err, transcript)
	}
	var status service.ApprovalStatusOutput
	r.status, r.statusOn = call("approval_status", map[string]any{"request_id": pending.ApprovalRequest}, &status)
	if status.Status != "granted" {
		t.Fatalf("%s: approval_status after the approval: %+v", version, status)
	}
	var applied service.ApplyOutput
	r.applied, r.appliedOn = call("terraform_apply", args, &applied)
	if applied.Status != service.StatusApplied || applied.Result == nil || !applied.Result.Applied {
		t.Fatalf("%s: the approved terraform_apply: %+v", version, applied)
	}
	var replay service.ApplyOutput
	r.replay, _ = call("terraform_apply", args, &replay)
	if replay.Status != service.StatusApprovalRequired || replay.ApprovalRequest == pending.ApprovalRequest {
		t.Errorf("%s: the used approval was accepted again: %+v", version, replay)
	}
	_ = exec.CommandContext(ctx, cfg.Binary, "deny", replay.ApprovalRequest, "--db", cfg.DB, "--reason", "e2e: replay check").Run()

	t.Logf("%s: plan %s on replica %d, approval filed on %d, status read on %d, applied %s on %d (%s)", version,
		r.plan, r.planOn, r.pendingOn, r.statusOn, r.applied, r.appliedOn, time.Since(start).Round(time.Second))
	if r.planOn == r.appliedOn || r.planOn < 0 || r.appliedOn < 0 {
		t.Errorf("%s: plan on replica %d and apply on %d; want two different replicas", version, r.planOn, r.appliedOn)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(strings.Join(r.progress, ","), "running") {
		t.Errorf("%s: no progress notification came through the balancer: %q", version, r.progress)
	}
	return r
}

// checkStatelessAudit verifies the shared audit log and finds each round's calls in it: the plan and the
// approved apply recorded by different servers, the apply's chain complete with its approval.
func checkStatelessAudit(t *testing.T, path string, rounds []*round) {
	t.Helper()
	if _, err := audit.VerifyFile(path); err != nil {
		t.Fatalf("the audit log two replicas wrote does not verify: %v", err)
	}
	recs, err := audit.ReadFile(path, audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	chains, servers := map[string][]string{}, map[string]string{}
	for _, rec := range recs {
		chains[rec.RequestID] = append(chains[rec.RequestID], rec.Event)
		if rec.Event == audit.EventToolRequest {
			servers[rec.RequestID] = fmt.Sprint(rec.Fields[service.FieldServer])
		}
	}
	applyChain := []string{audit.EventToolRequest, audit.EventGuardrailDecision, audit.EventApprovalGranted, audit.EventApprovalConsumed,
		audit.EventSandboxStarted, audit.EventCredentialIssued, audit.EventSandboxCompleted, audit.EventCredentialRevoked, audit.EventToolResult}
	for _, r := range rounds {
		if !isSubsequence(applyChain, chains[r.applied]) {
			t.Errorf("%s: the approved apply %s has the audit chain %v", r.version, r.applied, chains[r.applied])
		}
		if !isSubsequence([]string{audit.EventToolRequest, audit.EventApprovalRequested, audit.EventToolResult}, chains[r.pending]) {
			t.Errorf("%s: the apply that filed the approval %s has the audit chain %v", r.version, r.pending, chains[r.pending])
		}
		if p, a := servers[r.plan], servers[r.applied]; p == "" || a == "" || p == a {
			t.Errorf("%s: the plan was recorded by server %q and the apply by %q; want two different servers", r.version, p, a)
		}
	}
}

// checkRouted checks what the balancer saw: both replicas answered, no request carried or got a session,
// each client spoke its protocol version.
func checkRouted(t *testing.T, log []routedRequest) {
	t.Helper()
	served, calls := map[int]int{}, map[string]int{}
	var discover, initialize int
	for _, r := range log {
		served[r.Replica]++
		if r.Session != "" || r.Answered != "" {
			t.Errorf("a request carried or got an MCP session: %+v", r)
		}
		for _, m := range r.Methods {
			switch m {
			case "server/discover":
				discover++
			case "initialize":
				initialize++
			}
		}
		// An older client's GET stream for unprompted messages is 405 on a stateless server; it goes on.
		if r.Status >= 400 && !(r.Verb == http.MethodGet && r.Status == http.StatusMethodNotAllowed) {
			t.Errorf("a replica refused %+v", r)
		}
		switch {
		case r.Tool == "":
		case r.Meta == mcp.ProtocolVersion20260728:
			calls[mcp.ProtocolVersion20260728]++
		case r.Meta == "" && r.Header == mcp.ProtocolVersion20251125:
			calls[mcp.ProtocolVersion20251125]++
		default:
			t.Errorf("a tools/call with _meta protocol version %q and header %q", r.Meta, r.Header)
		}
	}
	if calls[mcp.ProtocolVersion20260728] == 0 || calls[mcp.ProtocolVersion20251125] == 0 {
		t.Errorf("tools/call by protocol version: %v; want both", calls)
	}
	if discover == 0 || initialize == 0 {
		t.Errorf("server/discover sent %d times, initialize %d; want both clients' handshakes", discover, initialize)
	}
	if served[0] == 0 || served[1] == 0 {
		t.Errorf("requests per replica: %v", served)
	}
	t.Logf("the balancer routed %d requests: %v per replica", len(log), served)
	for _, r := range log {
		t.Logf("  -> replica %d: %s %v %s header=%q meta=%q HTTP %d", r.Replica, r.Verb, r.Methods, r.Tool, r.Header, r.Meta, r.Status)
	}
}
