package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/agent-sandbox/agent-sandbox/bench/cpu"
)

// meter measures the CPU of the local cluster's components over windows of the benchmark (package
// bench/cpu): it turns process accounting and a taskstats listener on for as long as it lives, knows the components' PIDs from the
// cluster's pid files, and the non-sandbox Pods from the API server.
type meter struct {
	s     *cpu.Sampler
	at    cpu.Attribution
	pods  map[string]string // Pod UID -> component, for the Pods outside the sandbox namespace
	admin kubernetes.Interface
	ns    string
	ts    *cpu.Taskstats
	// writes holds the API server's write counts read with each sample.
	writes map[*cpu.Host]apiWrites
}

// window is one measured window: the components' CPU and the API server's writes.
type window struct {
	cpu.Window
	writes writesWindow
}

// pidFiles maps the local cluster's pid files ($AS_STATE/run/<name>.pid) to components.
var pidFiles = map[string]string{
	"etcd": cpu.Etcd, "kube-apiserver": cpu.APIServer, "kube-controller-manager": cpu.ControllerManager,
	"kube-scheduler": cpu.Scheduler, "kubelet": cpu.Kubelet, "containerd": cpu.Containerd,
	"kube-network-policies": cpu.NetworkPolicy, "vault": cpu.Vault,
}

func newMeter(stateDir, adminKubeconfig, sandboxNS, dir string) (*meter, error) {
	if adminKubeconfig == "" {
		return nil, fmt.Errorf("measuring CPU needs -admin-kubeconfig (to tell the webhook's Pods from the sandbox Pods)")
	}
	admin, err := clientset(adminKubeconfig)
	if err != nil {
		return nil, err
	}
	m := &meter{admin: admin, ns: sandboxNS, pods: map[string]string{}, writes: map[*cpu.Host]apiWrites{}}
	m.at = cpu.Attribution{PIDs: map[int]string{}, Pod: func(uid string) string { return m.pods[uid] }}
	for name, comp := range pidFiles {
		b, err := os.ReadFile(filepath.Join(stateDir, "run", name+".pid"))
		if err != nil {
			return nil, fmt.Errorf("the local cluster's %s: %w", name, err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			return nil, fmt.Errorf("pid file of %s: %w", name, err)
		}
		m.at.PIDs[pid] = comp
	}
	acct := filepath.Join(dir, "pacct")
	if err := os.WriteFile(acct, nil, 0o600); err != nil {
		return nil, err
	}
	if m.s, err = cpu.NewSampler("/proc", "/sys/fs/cgroup", acct); err != nil {
		return nil, err
	}
	if m.ts, err = cpu.StartTaskstats(); err != nil {
		return nil, err
	}
	m.at.ExitCPU = m.ts.CPU
	if err := cpu.StartAccounting(acct); err != nil {
		m.ts.Close()
		return nil, err
	}
	return m, nil
}

func (m *meter) close() {
	if err := cpu.StopAccounting(); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
	}
	if err := m.ts.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "bench: taskstats listener: %v (records without a message fell back to the accounting's CPU)\n", err)
	}
	m.ts.Close()
}

// track counts the process pid as component comp (the MCP server the benchmark starts).
func (m *meter) track(pid int, comp string) { m.at.PIDs[pid] = comp }

// sample reads the host, after learning the Pods outside the sandbox namespace.
func (m *meter) sample(ctx context.Context) (*cpu.Host, error) {
	pods, err := m.admin.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, p := range pods.Items {
		switch {
		case p.Namespace == m.ns:
		case strings.Contains(p.Name, "webhook"):
			m.pods[string(p.UID)] = cpu.WebhookPods
		default:
			m.pods[string(p.UID)] = cpu.OtherPods
		}
	}
	writes, err := readAPIWrites(ctx, m.admin)
	if err != nil {
		return nil, err
	}
	h, err := m.s.Sample()
	if err != nil {
		return nil, err
	}
	m.writes[h] = writes
	return h, nil
}

// since measures the window from sample a to now.
func (m *meter) since(ctx context.Context, a *cpu.Host) (window, error) {
	b, err := m.sample(ctx)
	if err != nil {
		return window{}, err
	}
	recs, err := m.s.Records(0)
	if err != nil {
		return window{}, err
	}
	w := cpu.Measure(m.at, a, b, recs[:min(b.AcctRecords, len(recs))])
	return window{Window: w, writes: writesBetween(m.writes[a], m.writes[b], w.Duration)}, nil
}

// idle measures the cluster at rest for d, while polling the sandbox namespace as waitWarm and waitQuiet
// do, so that the baseline subtracted from each window carries the benchmark's own API requests too.
func (m *meter) idle(ctx context.Context, cs kubernetes.Interface, d time.Duration) (window, error) {
	a, err := m.sample(ctx)
	if err != nil {
		return window{}, err
	}
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(pollEvery) {
		if _, err := cs.CoreV1().Pods(m.ns).List(ctx, metav1.ListOptions{}); err != nil {
			return window{}, err
		}
	}
	return m.since(ctx, a)
}

// baseline is the idle CPU rate per component (cores), of host runsc invocations (per second) and the idle
// windows' API writes.
type baseline struct {
	rates  map[string]float64
	runsc  float64
	writes writesWindow
}

func newBaseline(ws ...window) baseline {
	b := baseline{writes: writesWindow{delta: apiWrites{}}}
	var rs []map[string]float64
	for _, w := range ws {
		rs = append(rs, cpu.Rates(w.Window))
		b.runsc += float64(w.Runsc) / w.Duration.Seconds() / float64(len(ws))
		b.writes.d += w.writes.d
		for k, v := range w.writes.delta {
			b.writes.delta[k] += v
		}
	}
	b.rates = cpu.MeanRates(rs...)
	return b
}

// perCall is a window's CPU less the baseline over its length, divided by calls, in CPU-seconds.
func (b baseline) perCall(w window, calls int) float64 {
	return cpu.Sum(func(c string) float64 { return cpu.PerCall(w.Window, b.rates, c, calls) })
}

// printBreakdown prints a window's CPU per call by component, and the checks of the measurement.
func (b baseline) printBreakdown(w window, calls int) {
	idle := cpu.Sum(func(c string) float64 { return b.rates[c] })
	fmt.Printf("  %d calls in %s (from a quiet node to a quiet node): components used %.2f CPU-s, less idle %.3f cores x %s = %.2f CPU-s\n",
		calls, w.Duration.Round(100*time.Millisecond), w.Total().Seconds(), idle, w.Duration.Round(100*time.Millisecond), idle*w.Duration.Seconds())
	fmt.Printf("  per call by component (CPU-s, idle subtracted; idle cores in brackets):\n")
	for _, c := range cpu.Components {
		note := componentNotes[c]
		if c == cpu.RunscHost {
			n := (float64(w.Runsc) - b.runsc*w.Duration.Seconds()) / float64(calls)
			each := 0.0
			if w.Runsc > 0 {
				each = w.CPU[c].Seconds() / float64(w.Runsc) * 1000
			}
			note = fmt.Sprintf("%.1f runsc processes per call (%d exited in the window, %.2f/s at idle), %.0f ms each; %s", n, w.Runsc, b.runsc, each, note)
		}
		fmt.Printf("    %-28s %7.3f  [%.3f]  %s\n", c, cpu.PerCall(w.Window, b.rates, c, calls), b.rates[c], note)
	}
	fmt.Printf("  API writes per call (create, update, patch, delete; the idle rate subtracted): %s\n", w.writes.perCall(b.writes, calls))
	fmt.Printf("  checks: %d processes exited in the window, %d without a taskstats message (their CPU is the accounting record's, rounded down);"+
		" processes inside Pods by /proc + exit figures %.3f CPU-s per call vs the Pod cgroups %.3f (both before idle);"+
		" children reaped by live components: their cutime+cstime grew %.3f CPU-s per call, their exit figures say %.3f (the gap is CPU spent after the exit message);"+
		" other processes on the machine, not counted: %.2f cores%s\n",
		w.Exited, w.NoTaskstats,
		w.ProcessesInPods.Seconds()/float64(calls), (w.CPU[cpu.SandboxPods]+w.CPU[cpu.WebhookPods]+w.CPU[cpu.OtherPods]).Seconds()/float64(calls),
		w.ReapedProc.Seconds()/float64(calls), w.ReapedExit.Seconds()/float64(calls), w.Unattributed.Seconds()/w.Duration.Seconds(), lost(w.Window))
}

func lost(w cpu.Window) string {
	if w.LostPods == 0 {
		return ""
	}
	return fmt.Sprintf("; %d non-sandbox Pods went away in the window (their CPU is in the sandbox Pods' figure)", w.LostPods)
}

// componentNotes says where each figure comes from.
var componentNotes = map[string]string{
	cpu.RunscHost:         "the shims' runsc commands (state, create, start, wait, kill, delete, ...): process accounting + taskstats",
	cpu.SandboxPods:       "Sentry, gofers and what runs in them: kubepods cgroup less the other Pods' cgroups",
	cpu.Shims:             "containerd-shim-runsc-v1 and -runc-v2 themselves: /proc, process accounting + taskstats",
	cpu.Containerd:        "containerd and what it execs (CNI plugins): /proc, process accounting + taskstats",
	cpu.RuncHost:          "the webhook Pods' runc commands: process accounting",
	cpu.Kubelet:           "kubelet and what it execs (mount, umount, ...): /proc, process accounting + taskstats",
	cpu.APIServer:         "/proc",
	cpu.Etcd:              "/proc",
	cpu.ControllerManager: "the Job controller among others: /proc",
	cpu.Scheduler:         "/proc",
	cpu.NetworkPolicy:     "the NetworkPolicy enforcer (NRI + nfqueue verdicts): /proc",
	cpu.WebhookPods:       "admission and the warm pool: their Pod cgroups",
	cpu.OtherPods:         "any other Pod: their Pod cgroups",
	cpu.Vault:             "login, mint (SA, RoleBinding, token) and revoke: /proc",
	cpu.MCPServer:         "the agent-sandbox mcp process the benchmark talks to: /proc",
}
