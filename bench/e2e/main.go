// Command e2e measures agent-sandbox end to end on the live cluster (after make deploy): the MCP server's
// start-up (process start to the initialize reply) and memory; N sequential k8s_get_pod_status calls served
// by warm Pods that have been ready for a moment, a few (-fresh) claiming a Pod the moment it becomes ready,
// and N served by cold Jobs back to back, then a few (-quiet) cold calls that each wait for a quiet node,
// with p50/p95 of the total and of each phase as the server recorded them in the audit log (the cold
// phases cover both cold series); and C concurrent callers for a while, in calls per minute and CPU-seconds
// per call (package bench/cpu, idle baseline subtracted). With -cost (make bench-cost) it measures instead
// what each cold, warm and loaded call costs the node in CPU-seconds, by component (cost.go). It prints
// figures; it asserts nothing.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/agent-sandbox/agent-sandbox/bench/mcpserver"
	"github.com/agent-sandbox/agent-sandbox/bench/percentile"
	"github.com/agent-sandbox/agent-sandbox/internal/audit"
	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/mcp"
)

const tool = "k8s_get_pod_status"

type options struct {
	mcpserver.Options
	adminKubeconfig                             string
	n, fresh, quiet, concurrent, maxConcurrency int
	duration                                    time.Duration
	// make bench-cost (-cost): CPU per call by component instead of latency.
	cost  bool
	costN int
	idle  time.Duration
	state string
}

func main() {
	var o options
	o.Bind(flag.CommandLine)
	flag.StringVar(&o.adminKubeconfig, "admin-kubeconfig", "", "a kubeconfig that may list ServiceAccounts in the target namespaces (leftover check); empty skips it")
	flag.IntVar(&o.n, "n", 20, "sequential calls per mode (warm, cold); 0 skips both")
	flag.IntVar(&o.fresh, "fresh", 5, "warm calls that claim a Pod the moment it becomes ready (after the -n warm calls)")
	flag.IntVar(&o.quiet, "quiet", 5, "cold calls that each wait for a quiet node first (after the -n cold calls)")
	flag.IntVar(&o.concurrent, "concurrent", 32, "concurrent callers (0 skips the throughput run)")
	flag.IntVar(&o.maxConcurrency, "max-concurrency", 8, "the MCP server's --max-concurrency in the throughput run")
	flag.DurationVar(&o.duration, "duration", time.Minute, "length of the throughput run")
	flag.BoolVar(&o.cost, "cost", false, "measure CPU-seconds per call by component (make bench-cost) instead of latency")
	flag.IntVar(&o.costN, "cost-n", 8, "with -cost: sequential calls per mode (cold, warm)")
	flag.DurationVar(&o.idle, "idle", 15*time.Second, "length of each idle baseline the CPU figures subtract (-cost: one before, one after; the concurrent run: one before it; 0 skips the concurrent run's CPU figure)")
	flag.StringVar(&o.state, "state", "/var/lib/agent-sandbox-local", "the local cluster's state folder (its run/*.pid files name the components)")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintf(os.Stderr, "bench-e2e: %v\n", err)
		os.Exit(1)
	}
}

type server struct {
	c     *mcp.Client
	cmd   *exec.Cmd
	audit string
}

func start(ctx context.Context, o options, dir, name string, extra ...string) (*server, time.Duration, error) {
	auditLog := filepath.Join(dir, name+".jsonl")
	cmd := o.Command(filepath.Join(dir, name+".db"), auditLog, extra...)
	t := time.Now()
	c, err := mcp.DialCommand(ctx, cmd)
	if err != nil {
		return nil, 0, err
	}
	return &server{c: c, cmd: cmd, audit: auditLog}, time.Since(t), nil
}

func run(o options) error {
	dir, err := os.MkdirTemp("", "bench-e2e")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	pol, err := policy.LoadFile(o.Policy)
	if err != nil {
		return err
	}
	cs, err := clientset(o.Kubeconfig)
	if err != nil {
		return err
	}
	ns := pol.Spec.Sandbox.Namespace
	if o.cost {
		return runCost(ctx, o, dir, cs, ns)
	}

	// Start-up: a few cold starts of the server process, each to its initialize reply.
	var starts []time.Duration
	var rss []int
	for i := 0; i < 5; i++ {
		s, d, err := start(ctx, o, dir, "startup")
		if err != nil {
			return err
		}
		starts = append(starts, d)
		rss = append(rss, vmKB(s.cmd.Process.Pid, "VmRSS"))
		s.c.Close()
	}
	fmt.Printf("MCP server start-up to initialize reply (5 runs): p50 %s, min %s, max %s; RSS after start %d KB (p50)\n",
		ms(percentile.Of(starts, 50)), ms(percentile.Of(starts, 0)), ms(percentile.Of(starts, 100)), percentile.Of(rss, 50))

	var audits []struct{ name, file string }
	if o.n > 0 {
		// Warm: before each call, wait for the pool to have a ready Pod that has been ready for a moment (the
		// pool refills in the background; a call that finds none runs cold and is counted apart). Then a few
		// calls that claim a Pod the moment it becomes ready, which the kubelet serves about a second later:
		// what back-to-back calls get from a pool smaller than their rate.
		warm, _, err := start(ctx, o, dir, "warm")
		if err != nil {
			return err
		}
		series := func(n int, settle time.Duration) (totals []time.Duration, fellBack int, err error) {
			for j := 0; j < n; j++ {
				if err := waitWarm(ctx, cs, ns, settle, 2*time.Minute); err != nil {
					return nil, 0, err
				}
				t := time.Now()
				if err := call(ctx, warm.c); err != nil {
					return nil, 0, fmt.Errorf("warm call %d: %w", j, err)
				}
				d := time.Since(t)
				last, err := lastCompleted(warm.audit)
				if err != nil {
					return nil, 0, err
				}
				if w, _ := last.Fields["warm"].(bool); w {
					totals = append(totals, d)
				} else {
					fellBack++
				}
			}
			return totals, fellBack, nil
		}
		warmTotals, fellBack, err := series(o.n, warmSettle)
		if err != nil {
			return err
		}
		freshTotals, freshFellBack, err := series(o.fresh, 0)
		if err != nil {
			return err
		}
		hwm := vmKB(warm.cmd.Process.Pid, "VmHWM")
		warm.c.Close()

		cold, _, err := start(ctx, o, dir, "cold", "--warm=false")
		if err != nil {
			return err
		}
		// Cold: back to back, as a pool-less server serves a caller — each call's Pod starts while the
		// previous one is torn down (and, for the first, while the warm server's last refill starts). Then
		// a few that each wait until no sandbox Pod is starting or stopping: what the cold path itself costs.
		var coldTotals, quietTotals []time.Duration
		for j := 0; j < o.n+o.quiet; j++ {
			if j >= o.n {
				if err := waitQuiet(ctx, cs, ns, warmSettle, 2*time.Minute); err != nil {
					return err
				}
			}
			t := time.Now()
			if err := call(ctx, cold.c); err != nil {
				return fmt.Errorf("cold call %d: %w", j, err)
			}
			if j < o.n {
				coldTotals = append(coldTotals, time.Since(t))
			} else {
				quietTotals = append(quietTotals, time.Since(t))
			}
		}
		cold.c.Close()

		fmt.Printf("peak RSS of the MCP server after %d calls: %d KB\n\n", o.n, hwm)
		fmt.Printf("warm %s p50 %dms p95 %dms\n", tool, percentile.Of(warmTotals, 50).Milliseconds(), percentile.Of(warmTotals, 95).Milliseconds())
		fmt.Printf("cold %s p50 %dms p95 %dms\n", tool, percentile.Of(coldTotals, 50).Milliseconds(), percentile.Of(coldTotals, 95).Milliseconds())
		if fellBack > 0 {
			fmt.Printf("  (%d of %d warm-mode calls found no ready warm Pod and ran cold; they are not in the warm line)\n", fellBack, o.n)
		}
		if len(freshTotals) > 0 {
			fmt.Printf("  (warm line: each call waits until a Pod has been ready for %s; %d calls that claimed a Pod the moment it became ready: p50 %dms p95 %dms, %d ran cold)\n",
				warmSettle, len(freshTotals), percentile.Of(freshTotals, 50).Milliseconds(), percentile.Of(freshTotals, 95).Milliseconds(), freshFellBack)
		}
		if len(quietTotals) > 0 {
			fmt.Printf("  (cold line: back to back; %d cold calls that each waited for a quiet node: p50 %dms p95 %dms)\n",
				len(quietTotals), percentile.Of(quietTotals, 50).Milliseconds(), percentile.Of(quietTotals, 95).Milliseconds())
		}
		audits = append(audits, struct{ name, file string }{"warm", warm.audit}, struct{ name, file string }{"cold", cold.audit})
	}

	if o.concurrent > 0 {
		before, err := vaultAccounts(ctx, o.adminKubeconfig, pol)
		if err != nil {
			return err
		}
		s, _, err := start(ctx, o, dir, "concurrent", "--max-concurrency", strconv.Itoa(o.maxConcurrency))
		if err != nil {
			return err
		}
		st, perCall, how, err := concurrentRun(ctx, o, dir, cs, ns, s)
		if err != nil {
			return err
		}
		s.c.Close()
		perMin := float64(st.ok) / st.elapsed.Minutes()
		fmt.Printf("concurrent %d %s calls/min %d errors %d cpu per call %s\n", o.concurrent, tool, int(perMin), st.failed, perCall)
		fmt.Printf("  (%d calls in %s, MCP --max-concurrency %d; CPU per call: %s)\n", st.ok+st.failed, st.elapsed.Round(time.Second), o.maxConcurrency, how)
		if st.firstErr != "" {
			fmt.Printf("  first error: %s\n", st.firstErr)
		}
		if o.adminKubeconfig != "" {
			time.Sleep(15 * time.Second)
			after, err := vaultAccounts(ctx, o.adminKubeconfig, pol)
			if err != nil {
				return err
			}
			fmt.Printf("  Vault-minted ServiceAccounts left in the target namespaces 15 s later: %d (before the run: %d)\n", after, before)
		}
		audits = append(audits, struct{ name, file string }{"concurrent", s.audit})
	}

	for _, mode := range audits {
		phases, warm, err := phasesOf(mode.file)
		if err != nil {
			return err
		}
		fmt.Printf("\n%s phases (from the audit log; %d of %d calls served warm):\n", mode.name, warm, len(phases["total"]))
		for _, k := range []string{"admission", "pod_start", "mint", "run", "cleanup", "total"} {
			fmt.Printf("  %-10s p50 %7dms  p95 %7dms\n", k, percentile.Of(phases[k], 50).Milliseconds(), percentile.Of(phases[k], 95).Milliseconds())
		}
	}
	return nil
}

func call(ctx context.Context, c *mcp.Client) error {
	res, err := c.Call(ctx, tool, map[string]any{"namespace": "demo-app"})
	if err != nil {
		return err
	}
	if res.IsError {
		return fmt.Errorf("%s", res.Text)
	}
	return nil
}

// warmSettle is how long the warm line lets a Pod be ready before calling (internal/sandbox prefers Pods
// that have run this long, because the kubelet delivers a claim to a just-started Pod about a second late).
const warmSettle = 2 * time.Second

// pollEvery is how often waitWarm and waitQuiet list the sandbox namespace.
const pollEvery = 100 * time.Millisecond

// waitWarm waits until the sandbox namespace has a warm Pod of the tool that this process has seen
// claimable for settle (measured on this host's clock, so a skewed node clock does not matter).
func waitWarm(ctx context.Context, cs kubernetes.Interface, ns string, settle, limit time.Duration) error {
	sel := labels.Set{contract.LabelTool: tool, contract.LabelWarm: "true"}.String()
	seen := map[types.UID]time.Time{}
	end := time.Now().Add(limit)
	for time.Now().Before(end) {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return err
		}
		now := time.Now()
		for i := range pods.Items {
			p := &pods.Items[i]
			if !sandbox.Claimable(p) {
				continue
			}
			if _, ok := seen[p.UID]; !ok {
				seen[p.UID] = now
			}
			if now.Sub(seen[p.UID]) >= settle {
				return nil
			}
		}
		time.Sleep(pollEvery)
	}
	return fmt.Errorf("no warm %s Pod became ready within %s: is the pool enabled (policy warmPool, chart webhook.warmPool.enabled)?", tool, limit)
}

// waitQuiet waits until no Pod in the sandbox namespace is starting or stopping: every Pod is a warm Pod
// that has been claimable for settle, as seen by this process (an idle warm Pod costs little; a starting
// or stopping one costs the node most of its CPU).
func waitQuiet(ctx context.Context, cs kubernetes.Interface, ns string, settle, limit time.Duration) error {
	seen := map[types.UID]time.Time{}
	end := time.Now().Add(limit)
	for time.Now().Before(end) {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		now := time.Now()
		quiet := true
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.DeletionTimestamp == nil && (p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed) {
				continue // finished: its sandbox is gone
			}
			if p.Labels[contract.LabelWarm] != "true" || !sandbox.Claimable(p) {
				quiet = false
				continue
			}
			if _, ok := seen[p.UID]; !ok {
				seen[p.UID] = now
			}
			if now.Sub(seen[p.UID]) < settle {
				quiet = false
			}
		}
		if quiet {
			return nil
		}
		time.Sleep(pollEvery)
	}
	return fmt.Errorf("sandbox Pods in %s were still starting or stopping after %s", ns, limit)
}

func lastCompleted(file string) (*audit.Record, error) {
	recs, err := audit.ReadFile(file, audit.Filter{})
	if err != nil {
		return nil, err
	}
	for i := len(recs) - 1; i >= 0; i-- {
		if recs[i].Event == audit.EventSandboxCompleted {
			return &recs[i], nil
		}
	}
	return nil, fmt.Errorf("%s has no %s record", file, audit.EventSandboxCompleted)
}

// phasesOf collects the phase timings of every completed call in an audit log, and how many were warm.
func phasesOf(file string) (map[string][]time.Duration, int, error) {
	recs, err := audit.ReadFile(file, audit.Filter{})
	if err != nil {
		return nil, 0, err
	}
	phases := map[string][]time.Duration{}
	warm := 0
	for _, r := range recs {
		if r.Event != audit.EventSandboxCompleted {
			continue
		}
		if w, _ := r.Fields["warm"].(bool); w {
			warm++
		}
		t, _ := r.Fields["timings_ms"].(map[string]any)
		for k, v := range t {
			if f, ok := v.(float64); ok {
				phases[k] = append(phases[k], time.Duration(f)*time.Millisecond)
			}
		}
	}
	return phases, warm, nil
}

// clientset is a client of the cluster kubeconfig names.
func clientset(kubeconfig string) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return cs, nil
}

// vaultAccounts counts the ServiceAccounts Vault minted (named v-as-…) in the policy's target namespaces.
func vaultAccounts(ctx context.Context, kubeconfig string, pol *policy.Compiled) (int, error) {
	if kubeconfig == "" {
		return 0, nil
	}
	cs, err := clientset(kubeconfig)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, ns := range pol.TargetNamespaces() {
		list, err := cs.CoreV1().ServiceAccounts(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0, err
		}
		for _, sa := range list.Items {
			if strings.HasPrefix(sa.Name, "v-as-") {
				n++
			}
		}
	}
	return n, nil
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

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/1e6) }
