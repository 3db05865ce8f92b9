package cpu

import (
	"sort"
	"strings"
	"time"
)

// The components a window's CPU is attributed to.
const (
	RunscHost         = "host runsc invocations"
	RuncHost          = "host runc invocations"
	Shims             = "containerd shims"
	Containerd        = "containerd"
	Kubelet           = "kubelet"
	APIServer         = "kube-apiserver"
	Etcd              = "etcd"
	ControllerManager = "kube-controller-manager"
	Scheduler         = "kube-scheduler"
	NetworkPolicy     = "kube-network-policies"
	Vault             = "Vault"
	MCPServer         = "MCP server"
	SandboxPods       = "sandbox Pods (Sentry+gofer)"
	WebhookPods       = "webhook Pods"
	OtherPods         = "other Pods"
)

// inPod marks a process whose CPU its Pod's cgroup counts; unattributed one that belongs to no component
// (another user's build, the benchmark itself).
const (
	inPod        = "\x00pod"
	unattributed = ""
)

// Components lists every component in the order the benchmark prints them.
var Components = []string{RunscHost, SandboxPods, Shims, Containerd, RuncHost, Kubelet, APIServer, Etcd,
	ControllerManager, Scheduler, NetworkPolicy, WebhookPods, OtherPods, Vault, MCPServer}

// own names the component of a process by its command name alone, or "" when the name does not tell.
func own(comm string) string {
	switch {
	case comm == "runsc":
		return RunscHost
	case comm == "runc":
		return RuncHost
	case strings.HasPrefix(comm, "containerd-shim"):
		return Shims
	}
	return ""
}

// Window is the CPU each component used between two samples.
type Window struct {
	Duration time.Duration
	CPU      map[string]time.Duration
	// Runsc is how many host runsc processes exited in the window (process accounting).
	Runsc int
	// ProcessesInPods is the CPU of the processes inside Pod cgroups as /proc and process accounting saw
	// them: a check of the cgroup figures, which it should match (less the accounting's rounding).
	ProcessesInPods time.Duration
	// ReapedProc is how much the cutime+cstime of the component processes live across the window grew;
	// ReapedExit is what the exit figures (taskstats) say of the processes they reaped. The gap is the CPU
	// an exiting process spends after its taskstats message (freeing its memory) and the slice the
	// scheduler had not yet added up when it was sent.
	ReapedProc, ReapedExit time.Duration
	// Exited is how many processes exited in the window; NoTaskstats how many of them had no taskstats
	// message (their CPU is then the accounting record's, rounded down to 10 ms).
	Exited, NoTaskstats int
	// Unattributed is the CPU of the other processes on the machine: not counted.
	Unattributed time.Duration
	// LostPods counts the non-sandbox Pods whose cgroup was gone at the end (their CPU is then in SandboxPods).
	LostPods int
}

// Total is the CPU of every component.
func (w Window) Total() time.Duration {
	var t time.Duration
	for _, v := range w.CPU {
		t += v
	}
	return t
}

// Attribution says which component each long-lived process or Pod is.
type Attribution struct {
	// PIDs names the components' own processes (from the local cluster's pid files, the MCP server's PID).
	PIDs map[int]string
	// Pod names the component of a Pod cgroup by Pod UID: "" for a sandbox Pod.
	Pod func(uid string) string
	// ExitCPU is the CPU of the process pid that exited at about end, from taskstats; nil, or false,
	// falls back to the accounting record's own figure.
	ExitCPU func(pid int, end time.Time) (time.Duration, bool)
}

// slack is how far a process's start time in /proc and in its accounting record may disagree (the
// record holds whole seconds).
const slack = 2 * time.Second

type classifier struct {
	at       Attribution
	a, b     *Host
	recs     []Acct        // every record up to the end of the window
	byPID    map[int][]int // indexes into recs
	survivor map[int]bool  // PIDs live, as the same process, at both ends
}

func newClassifier(at Attribution, a, b *Host, recs []Acct) *classifier {
	c := &classifier{at: at, a: a, b: b, recs: recs, byPID: map[int][]int{}, survivor: map[int]bool{}}
	for i, r := range recs {
		c.byPID[r.PID] = append(c.byPID[r.PID], i)
	}
	for pid, p := range a.Procs {
		if q, ok := b.Procs[pid]; ok && q.Start == p.Start {
			c.survivor[pid] = true
		}
	}
	return c
}

// live finds the live process pid that had started by t, in either sample.
func (c *classifier) live(pid int, t time.Time) (Proc, bool) {
	for _, h := range []*Host{c.b, c.a} {
		if p, ok := h.Procs[pid]; ok && !p.Begin.After(t.Add(slack)) {
			return p, true
		}
	}
	return Proc{}, false
}

// exited finds the accounting record of the process pid that had started by t and ended at or after end.
func (c *classifier) exited(pid int, t, end time.Time) (Acct, bool) {
	idx := c.byPID[pid]
	for i := len(idx) - 1; i >= 0; i-- {
		r := c.recs[idx[i]]
		if !r.Begin.After(t.Add(slack)) && !r.End.Before(end.Add(-slack)) {
			return r, true
		}
	}
	return Acct{}, false
}

// inherit turns a parent's component into its child's: what a shim starts (other than runsc or runc)
// runs in a Pod.
func inherit(parent string) string {
	if parent == Shims {
		return inPod
	}
	return parent
}

// ofProc names a live process's component.
func (c *classifier) ofProc(p Proc, depth int) string {
	if n, ok := c.at.PIDs[p.PID]; ok {
		return n
	}
	if p.InPod {
		return inPod
	}
	if n := own(p.Comm); n != "" {
		return n
	}
	return c.ofParent(p.PPID, p.Begin, p.Begin, depth)
}

// ofRecord names an exited process's component.
func (c *classifier) ofRecord(r Acct, depth int) string {
	if n := own(r.Comm); n != "" {
		return n
	}
	return c.ofParent(r.PPID, r.Begin, r.End, depth)
}

func (c *classifier) ofParent(ppid int, begin, end time.Time, depth int) string {
	if ppid <= 1 || depth > 64 {
		return unattributed
	}
	if p, ok := c.live(ppid, begin); ok {
		return inherit(c.ofProc(p, depth+1))
	}
	if r, ok := c.exited(ppid, begin, end); ok {
		return inherit(c.ofRecord(r, depth+1))
	}
	return unattributed
}

// reaper is the nearest ancestor of an exited process that is live at both ends: the one whose
// cutime+cstime grew by the process's CPU.
func (c *classifier) reaper(r Acct) int {
	for depth := 0; depth < 64; depth++ {
		if c.survivor[r.PPID] {
			return r.PPID
		}
		p, ok := c.exited(r.PPID, r.Begin, r.End)
		if !ok {
			return 0
		}
		r = p
	}
	return 0
}

// Measure attributes the CPU used between samples a and b. recs are the accounting records from the
// start of the file to b (b.AcctRecords of them); those after a.AcctRecords are the processes that exited
// in between.
func Measure(at Attribution, a, b *Host, recs []Acct) Window {
	w := Window{Duration: b.At.Sub(a.At), CPU: map[string]time.Duration{}}
	c := newClassifier(at, a, b, recs)
	add := func(comp string, d time.Duration) {
		switch comp {
		case inPod:
			w.ProcessesInPods += d
		case unattributed:
			w.Unattributed += d
		default:
			w.CPU[comp] += d
		}
	}
	for pid, p := range b.Procs {
		d := p.Self
		if c.survivor[pid] {
			d -= a.Procs[pid].Self
		}
		comp := c.ofProc(p, 0)
		add(comp, d)
		if c.survivor[pid] && comp != inPod && comp != unattributed {
			w.ReapedProc += p.Children - a.Procs[pid].Children
		}
	}
	for _, r := range recs[min(a.AcctRecords, len(recs)):] {
		w.Exited++
		if at.ExitCPU != nil {
			if cpu, ok := at.ExitCPU(r.PID, r.End); ok {
				r.CPU = cpu
			} else {
				w.NoTaskstats++
			}
		}
		d := r.CPU
		// A process live at the start that exited since: its record holds its whole life.
		if p, ok := a.Procs[r.PID]; ok && absDur(p.Begin.Sub(r.Begin)) <= slack {
			d -= p.Self
		}
		comp := c.ofRecord(r, 0)
		add(comp, d)
		if comp == RunscHost && r.Comm == "runsc" {
			w.Runsc++
		}
		if pid := c.reaper(r); pid != 0 {
			if rc := c.ofProc(b.Procs[pid], 0); rc != inPod && rc != unattributed {
				w.ReapedExit += r.CPU
			}
		}
	}
	w.attributePods(at, a, b)
	return w
}

// attributePods splits the Pod cgroups' CPU: the non-sandbox Pods by their own cgroups, the sandbox Pods
// as everything else in kubepods (its counter keeps the CPU of Pods whose cgroups are gone).
func (w *Window) attributePods(at Attribution, a, b *Host) {
	rest := b.Kubepods - a.Kubepods
	uids := make([]string, 0, len(a.Pods)+len(b.Pods))
	for uid := range a.Pods {
		uids = append(uids, uid)
	}
	for uid := range b.Pods {
		if _, ok := a.Pods[uid]; !ok {
			uids = append(uids, uid)
		}
	}
	sort.Strings(uids)
	for _, uid := range uids {
		comp := at.Pod(uid)
		if comp == "" {
			continue
		}
		after, ok := b.Pods[uid]
		if !ok {
			w.LostPods++
			continue
		}
		d := after - a.Pods[uid]
		w.CPU[comp] += d
		rest -= d
	}
	w.CPU[SandboxPods] += rest
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// Rates turns a window into CPU per second of wall time, per component: an idle baseline.
func Rates(w Window) map[string]float64 {
	out := map[string]float64{}
	for k, v := range w.CPU {
		out[k] = v.Seconds() / w.Duration.Seconds()
	}
	return out
}

// MeanRates averages idle baselines component by component.
func MeanRates(rs ...map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for _, r := range rs {
		for k, v := range r {
			out[k] += v / float64(len(rs))
		}
	}
	return out
}

// PerCall is one component's CPU in a window less its idle rate over the window's length, divided by calls.
func PerCall(w Window, idle map[string]float64, comp string, calls int) float64 {
	return (w.CPU[comp].Seconds() - idle[comp]*w.Duration.Seconds()) / float64(calls)
}

// Sum adds up rates or per-call figures over all components.
func Sum(f func(comp string) float64) float64 {
	t := 0.0
	for _, c := range Components {
		t += f(c)
	}
	return t
}
