// Command e2e measures agent-sandbox end to end on the live cluster (after make deploy): the MCP server's
// start-up (process start to the initialize reply) and memory, and N sequential k8s_get_pod_status calls,
// with p50/p95 of the total and of each phase (admission, pod start, credentials, run, cleanup) as the
// server recorded them in the audit log. It prints figures; it asserts nothing.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/audit"
	"github.com/agent-sandbox/agent-sandbox/mcp"
)

func main() {
	bin := flag.String("binary", "bin/agent-sandbox", "the agent-sandbox binary")
	pol := flag.String("policy", "policy/policy.yaml", "policy")
	kc := flag.String("kubeconfig", "", "the MCP server's kubeconfig")
	ws := flag.String("workspaces", "terraform", "workspaces folder")
	n := flag.Int("n", 20, "sequential calls")
	flag.Parse()
	if err := run(*bin, *pol, *kc, *ws, *n); err != nil {
		fmt.Fprintf(os.Stderr, "bench-e2e: %v\n", err)
		os.Exit(1)
	}
}

func run(bin, pol, kc, ws string, n int) error {
	dir, err := os.MkdirTemp("", "bench-e2e")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	auditLog := filepath.Join(dir, "audit.jsonl")
	ctx := context.Background()

	// Start-up: a few cold starts of the server process, each to its initialize reply.
	var starts []time.Duration
	var rss []int
	for i := 0; i < 5; i++ {
		cmd := exec.Command(bin, "mcp", "--policy", pol, "--kubeconfig", kc, "--workspaces", ws,
			"--db", filepath.Join(dir, "approvals.db"), "--audit-log", auditLog)
		t := time.Now()
		c, err := mcp.DialCommand(ctx, cmd)
		if err != nil {
			return err
		}
		starts = append(starts, time.Since(t))
		rss = append(rss, vmKB(cmd.Process.Pid, "VmRSS"))
		if i < 4 {
			c.Close()
			continue
		}
		var totals []time.Duration
		for j := 0; j < n; j++ {
			t := time.Now()
			res, err := c.Call(ctx, "k8s_get_pod_status", map[string]any{"namespace": "demo-app"})
			if err != nil {
				return err
			}
			if res.IsError {
				return fmt.Errorf("call %d: %s", j, res.Text)
			}
			totals = append(totals, time.Since(t))
		}
		hwm := vmKB(cmd.Process.Pid, "VmHWM")
		c.Close()
		fmt.Printf("MCP server start-up to initialize reply (5 runs): p50 %s, min %s, max %s; RSS after start %d KB (p50), peak RSS after %d calls %d KB\n",
			ms(pct(starts, 50)), ms(pct(starts, 0)), ms(pct(starts, 100)), pctInt(rss, 50), n, hwm)
		fmt.Printf("\n%d sequential k8s_get_pod_status calls (MCP stdio, one gVisor Job each):\n", n)
		fmt.Printf("  %-12s p50 %9s  p95 %9s\n", "total", ms(pct(totals, 50)), ms(pct(totals, 95)))
	}
	recs, err := audit.ReadFile(auditLog, audit.Filter{})
	if err != nil {
		return err
	}
	phases := map[string][]time.Duration{}
	for _, r := range recs {
		if r.Event != audit.EventSandboxCompleted {
			continue
		}
		t, _ := r.Fields["timings_ms"].(map[string]any)
		for k, v := range t {
			if f, ok := v.(float64); ok {
				phases[k] = append(phases[k], time.Duration(f)*time.Millisecond)
			}
		}
	}
	for _, k := range []string{"admission", "pod_start", "credentials", "run", "cleanup", "total"} {
		fmt.Printf("  %-12s p50 %9s  p95 %9s   (sandbox %s, from the audit log)\n", k, ms(pct(phases[k], 50)), ms(pct(phases[k], 95)), strings.ReplaceAll(k, "_", " "))
	}
	return nil
}

func vmKB(pid int, field string) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, field+":") {
			f := strings.Fields(l)
			v, _ := strconv.Atoi(f[1])
			return v
		}
	}
	return -1
}

func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[(len(s)-1)*p/100]
}

func pctInt(d []int, p int) int {
	s := append([]int(nil), d...)
	sort.Ints(s)
	return s[(len(s)-1)*p/100]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/1e6) }
