// Command soak runs C concurrent MCP callers (each its own streamable-HTTP session) against one MCP server on
// the live cluster for a while, calling k8s_get_pod_status, then checks that nothing leaked: every call's
// audit chain is complete and the log verifies, no Vault-minted ServiceAccount, Role or RoleBinding and no
// call Job is left, and the server's memory and goroutines came back to where they were. It prints figures
// and a LEAKS line; it exits 1 when something leaked (not when calls failed: those are counted).
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/agent-sandbox/agent-sandbox/bench/mcpserver"
	"github.com/agent-sandbox/agent-sandbox/internal/audit"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/mcp"
	"github.com/agent-sandbox/agent-sandbox/test/harness"
)

const tool = "k8s_get_pod_status"

type options struct {
	mcpserver.Options
	adminKubeconfig         string
	callers, maxConcurrency int
	duration                time.Duration
}

func main() {
	var o options
	o.Bind(flag.CommandLine)
	flag.StringVar(&o.adminKubeconfig, "admin-kubeconfig", "", "a kubeconfig that may list Jobs, ServiceAccounts, Roles and RoleBindings (leak checks)")
	flag.IntVar(&o.callers, "callers", 32, "concurrent MCP sessions, each calling in a loop")
	flag.IntVar(&o.maxConcurrency, "max-concurrency", 8, "the MCP server's --max-concurrency")
	flag.DurationVar(&o.duration, "duration", 5*time.Minute, "how long the callers call")
	flag.Parse()
	leaks, err := run(o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "soak: %v\n", err)
		os.Exit(2)
	}
	if leaks > 0 {
		os.Exit(1)
	}
}

type sample struct {
	at                time.Duration
	rssKB, goroutines int
}

func run(o options) (int, error) {
	ctx := context.Background()
	pol, err := policy.LoadFile(o.Policy)
	if err != nil {
		return 0, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", o.adminKubeconfig)
	if err != nil {
		return 0, fmt.Errorf("--admin-kubeconfig: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return 0, err
	}
	dir, err := os.MkdirTemp("", "soak")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	tok := make([]byte, 24)
	_, _ = rand.Read(tok)
	token := hex.EncodeToString(tok)
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		return 0, err
	}
	port, err := harness.FreePort()
	if err != nil {
		return 0, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	auditLog := filepath.Join(dir, "audit.jsonl")
	cmd := o.Command(filepath.Join(dir, "approvals.db"), auditLog, "--max-concurrency", strconv.Itoa(o.maxConcurrency),
		"--http", addr, "--http-token-file", tokenFile)
	serverLog, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		return 0, err
	}
	cmd.Stderr = serverLog
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	base := "http://" + addr
	if err := waitHealthy(base, 30*time.Second); err != nil {
		return 0, err
	}
	since := time.Now()
	beforeMinted, err := minted(ctx, cs, pol, time.Time{})
	if err != nil {
		return 0, err
	}

	// One warm-up call, so the first sample is of a server that has done its lazy set-up.
	warm, err := mcp.DialHTTP(ctx, base+"/mcp", token)
	if err != nil {
		return 0, err
	}
	if _, err := warm.Call(ctx, tool, map[string]any{"namespace": "demo-app"}); err != nil {
		return 0, err
	}
	_ = warm.Close()
	time.Sleep(2 * time.Second)
	start := metrics(base, token)
	start.at = 0
	fmt.Printf("soak: %d MCP sessions calling %s for %s against one server (--max-concurrency %d)\n", o.callers, tool, o.duration, o.maxConcurrency)
	fmt.Printf("  start: RSS %d KB, goroutines %d\n", start.rssKB, start.goroutines)

	var ok, failed, protoErr atomic.Int64
	var firstErr atomic.Value
	deadline := time.Now().Add(o.duration)
	t0 := time.Now()
	var wg sync.WaitGroup
	for i := 0; i < o.callers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := mcp.DialHTTP(ctx, base+"/mcp", token)
			if err != nil {
				protoErr.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
				return
			}
			defer c.Close()
			for time.Now().Before(deadline) {
				res, err := c.Call(ctx, tool, map[string]any{"namespace": "demo-app"})
				switch {
				case err != nil:
					protoErr.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				case res.IsError:
					failed.Add(1)
					firstErr.CompareAndSwap(nil, res.Text)
				default:
					ok.Add(1)
				}
			}
		}()
	}
	samples := []sample{start}
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Add(1)
	go func() {
		defer sampler.Done()
		tick := time.NewTicker(30 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				s := metrics(base, token)
				s.at = time.Since(t0)
				samples = append(samples, s)
			}
		}
	}()
	wg.Wait()
	close(stop)
	sampler.Wait()
	elapsed := time.Since(t0)
	// Idle again: the sessions are closed; give the server a moment to let go of them.
	time.Sleep(5 * time.Second)
	end := metrics(base, token)
	end.at = time.Since(t0)
	samples = append(samples, end)

	total := ok.Load() + failed.Load() + protoErr.Load()
	fmt.Printf("  calls: %d in %s (%d/min): %d ok, %d failed with a tool error, %d protocol errors\n",
		total, elapsed.Round(time.Second), int(float64(ok.Load())/elapsed.Minutes()), ok.Load(), failed.Load(), protoErr.Load())
	if e, _ := firstErr.Load().(string); e != "" {
		fmt.Printf("  first error: %s\n", firstLine(e))
	}
	fmt.Printf("  server over time (RSS KB / goroutines):")
	for _, s := range samples {
		fmt.Printf(" %s %d/%d", s.at.Round(time.Second), s.rssKB, s.goroutines)
	}
	fmt.Println()
	fmt.Printf("  end: RSS %d KB (start %d KB, %+.0f%%), goroutines %d (start %d)\n", end.rssKB, start.rssKB,
		100*float64(end.rssKB-start.rssKB)/float64(max(start.rssKB, 1)), end.goroutines, start.goroutines)

	leaks := 0
	// Audit: the chain verifies, and every call that began ended; every sandbox that started completed; every
	// credential issued was revoked.
	if _, err := audit.VerifyFile(auditLog); err != nil {
		fmt.Printf("  LEAK audit verify: %v\n", err)
		leaks++
	}
	incomplete, calls, err := incompleteChains(auditLog)
	if err != nil {
		return 0, err
	}
	fmt.Printf("  audit: %d calls, %d with an incomplete chain\n", calls, len(incomplete))
	if len(incomplete) > 0 {
		leaks += len(incomplete)
		for i, s := range incomplete {
			if i == 5 {
				fmt.Printf("    ...\n")
				break
			}
			fmt.Printf("    %s\n", s)
		}
	}
	// The cluster: within a minute no call Job and no Vault-minted object of this run remains.
	var jobs []string
	var left []string
	for i := 0; i < 60; i++ {
		if jobs, err = sandbox.CallJobs(ctx, cs, pol.Spec.Sandbox.Namespace); err != nil {
			return 0, err
		}
		if left, err = minted(ctx, cs, pol, since); err != nil {
			return 0, err
		}
		if len(jobs) == 0 && len(left) == 0 {
			break
		}
		time.Sleep(time.Second)
	}
	fmt.Printf("  left after a minute: %d call Jobs, %d Vault-minted ServiceAccounts/Roles/RoleBindings (%d older ones before the run)\n",
		len(jobs), len(left), len(beforeMinted))
	leaks += len(jobs) + len(left)
	fmt.Printf("LEAKS %d\n", leaks)
	return leaks, nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

func waitHealthy(base string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if r, err := http.Get(base + "/healthz"); err == nil {
			r.Body.Close()
			if r.StatusCode == 200 {
				return nil
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("the MCP server at %s was not healthy within %s", base, limit)
}

// metrics reads the server's RSS and goroutines from its Prometheus endpoint.
func metrics(base, token string) sample {
	s := sample{rssKB: -1, goroutines: -1}
	req, _ := http.NewRequest(http.MethodGet, base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		return s
	}
	defer r.Body.Close()
	sc := bufio.NewScanner(io.LimitReader(r.Body, 4<<20))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "process_resident_memory_bytes":
			s.rssKB = int(v / 1024)
		case "go_goroutines":
			s.goroutines = int(v)
		}
	}
	return s
}

// incompleteChains names the calls whose chain did not close: a tool.request without tool.result, a
// sandbox.started without sandbox.completed, a credential.issued without credential.revoked.
func incompleteChains(path string) ([]string, int, error) {
	recs, err := audit.ReadFile(path, audit.Filter{})
	if err != nil {
		return nil, 0, err
	}
	type counts struct{ req, res, started, completed, issued, revoked int }
	by := map[string]*counts{}
	var order []string
	for _, r := range recs {
		c := by[r.RequestID]
		if c == nil {
			c = &counts{}
			by[r.RequestID] = c
			order = append(order, r.RequestID)
		}
		switch r.Event {
		case audit.EventToolRequest:
			c.req++
		case audit.EventToolResult:
			c.res++
		case audit.EventSandboxStarted:
			c.started++
		case audit.EventSandboxCompleted:
			c.completed++
		case audit.EventCredentialIssued:
			c.issued++
		case audit.EventCredentialRevoked:
			c.revoked++
		}
	}
	var bad []string
	calls := 0
	for _, id := range order {
		c := by[id]
		if c.req == 0 {
			continue
		}
		calls++
		if c.res != 1 || c.started != c.completed || c.issued != c.revoked {
			bad = append(bad, fmt.Sprintf("%s: request %d result %d started %d completed %d issued %d revoked %d", id, c.req, c.res, c.started, c.completed, c.issued, c.revoked))
		}
	}
	return bad, calls, nil
}

// minted lists the Vault-minted objects in the policy's target namespaces created at or after since.
func minted(ctx context.Context, cs kubernetes.Interface, pol *policy.Compiled, since time.Time) ([]string, error) {
	var out []string
	keep := func(kind string, m metav1.ObjectMeta) {
		if strings.HasPrefix(m.Name, "v-as-") && !m.CreationTimestamp.Time.Before(since.Truncate(time.Second)) {
			out = append(out, kind+"/"+m.Namespace+"/"+m.Name)
		}
	}
	for _, ns := range pol.TargetNamespaces() {
		sas, err := cs.CoreV1().ServiceAccounts(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for _, o := range sas.Items {
			keep("serviceaccount", o.ObjectMeta)
		}
		roles, err := cs.RbacV1().Roles(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for _, o := range roles.Items {
			keep("role", o.ObjectMeta)
		}
		rbs, err := cs.RbacV1().RoleBindings(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for _, o := range rbs.Items {
			keep("rolebinding", o.ObjectMeta)
		}
	}
	return out, nil
}
