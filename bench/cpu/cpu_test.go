package cpu

import (
	"os"
	"testing"
	"time"
)

func read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The fixtures were read on the local cluster's node: containerd, a gVisor shim (its reaped children are
// its runsc invocations), and a process whose name holds ") (".
func TestParseStat(t *testing.T) {
	for _, tc := range []struct {
		file string
		want Stat
	}{
		{"stat-containerd.txt", Stat{PID: 11129, PPID: 1, Comm: "containerd", Start: 2216233, Self: 4400 * time.Millisecond, Children: 580 * time.Millisecond}},
		{"stat-shim.txt", Stat{PID: 12925, PPID: 1, Comm: "containerd-shim", Start: 2219531, Self: 70 * time.Millisecond, Children: 170 * time.Millisecond}},
		{"stat-paren.txt", Stat{PID: 17654, PPID: 17653, Comm: "a b) (c", Start: 2246083}},
	} {
		got, err := ParseStat(read(t, tc.file))
		if err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		if got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.file, got, tc.want)
		}
	}
	for _, bad := range []string{"", "12 no-parens S 1", "12 (x) S 1 2 3", "x (y) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20"} {
		if _, err := ParseStat(bad); err == nil {
			t.Errorf("ParseStat(%q) accepted", bad)
		}
	}
}

func TestParseBootTime(t *testing.T) {
	got, err := ParseBootTime("cpu  1 2 3\nintr 5\nbtime 1796201585\nprocesses 9\n")
	if err != nil || got != 1796201585 {
		t.Fatalf("got %d, %v", got, err)
	}
	if _, err := ParseBootTime("cpu 1\n"); err == nil {
		t.Fatal("no btime accepted")
	}
}

// acct-v3.pacct was written by the kernel of the node while true, a busy sh loop and sleep 0.3 ran
// (someone's compile and link exited meanwhile, so they are in it too).
func TestParseAcct(t *testing.T) {
	recs, err := ParseAcct([]byte(read(t, "acct-v3.pacct")))
	if err != nil {
		t.Fatal(err)
	}
	type r struct {
		pid, ppid int
		comm      string
		cpu       time.Duration
	}
	want := []r{{17462, 17417, "true", 0}, {17458, 17203, "compile", 30 * time.Millisecond}, {17464, 17203, "link", 0},
		{17463, 17417, "sh", 170 * time.Millisecond}, {17473, 17417, "sleep", 0}, {17417, 17412, "python3", 0}}
	if len(recs) != len(want) {
		t.Fatalf("got %d records, want %d", len(recs), len(want))
	}
	for i, w := range want {
		g := recs[i]
		if (r{g.PID, g.PPID, g.Comm, g.CPU}) != w {
			t.Errorf("record %d: got %+v, want %+v", i, g, w)
		}
	}
	if d := recs[4].End.Sub(recs[4].Begin); d != 300*time.Millisecond {
		t.Errorf("sleep 0.3 ran %s by its record", d)
	}
	if _, err := ParseAcct(make([]byte, 65)); err == nil {
		t.Error("a partial record accepted")
	}
	if _, err := ParseAcct(make([]byte, 64)); err == nil {
		t.Error("a version 0 record accepted")
	}
}

func TestCompT(t *testing.T) {
	for c, want := range map[uint16]time.Duration{0: 0, 17: 17, 0x1fff: 8191, 1<<13 | 1: 8, 2<<13 | 3: 192} {
		if got := compT(c); got != want {
			t.Errorf("compT(%#x) = %d, want %d", c, got, want)
		}
	}
}

func TestCgroupFiles(t *testing.T) {
	u, err := ParseCPUAcctUsage(read(t, "cpuacct.usage"))
	if err != nil || u != 3095949821101 {
		t.Errorf("cpuacct.usage: %d, %v", u, err)
	}
	u, err = ParseCPUStat(read(t, "cpu.stat"))
	if err != nil || u != 29614924582*time.Microsecond {
		t.Errorf("cpu.stat: %d, %v", u, err)
	}
	if _, err := ParseCPUStat("user_usec 5\n"); err == nil {
		t.Error("cpu.stat without usage_usec accepted")
	}
	gofer := CPUCgroup(read(t, "cgroup-gofer.txt"))
	if gofer != "/kubepods/burstable/poda8c22972-e3c0-46e7-bb1c-e8602f93b3f5" {
		t.Errorf("gofer's cgroup %q", gofer)
	}
	if uid := PodUID(gofer); uid != "a8c22972-e3c0-46e7-bb1c-e8602f93b3f5" {
		t.Errorf("gofer's Pod %q", uid)
	}
	if cg := CPUCgroup(read(t, "cgroup-containerd.txt")); cg != "/" || PodUID(cg) != "" {
		t.Errorf("containerd's cgroup %q is a Pod's", cg)
	}
	if cg := CPUCgroup("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-poda8c22972_e3c0_46e7_bb1c_e8602f93b3f5.slice/cri-containerd-1.scope\n"); PodUID(cg) != "a8c22972-e3c0-46e7-bb1c-e8602f93b3f5" {
		t.Errorf("systemd-driver v2 cgroup %q: Pod %q", cg, PodUID(cg))
	}
}

// A window on a small host: the kubelet and a gVisor shim live throughout, a warm Pod's runsc wait (live
// at the start) and a runsc state exit, a sandbox process (exe, child of the shim) exits, a CNI plugin run
// by containerd exits, someone's compiler exits, and the webhook Pod's cgroup is measured apart from the
// sandbox Pods'.
func TestMeasure(t *testing.T) {
	t0 := time.Unix(1796201585, 0).Add(time.Hour)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	proc := func(pid, ppid int, comm string, start uint64, self, children int, inPod bool) Proc {
		return Proc{Stat: Stat{PID: pid, PPID: ppid, Comm: comm, Start: start, Self: ms(self), Children: ms(children)},
			Begin: t0.Add(-time.Minute).Add(time.Duration(start) * time.Second), InPod: inPod}
	}
	a := &Host{At: t0, Kubepods: ms(10000), Pods: map[string]time.Duration{"web": ms(2000), "sbx": ms(500)}, AcctRecords: 1,
		Procs: map[int]Proc{
			10: proc(10, 1, "kubelet", 1, 1000, 0, false),
			11: proc(11, 1, "containerd", 1, 500, 100, false),
			20: proc(20, 1, "containerd-shim", 2, 50, 40, false),
			21: proc(21, 20, "runsc", 3, 30, 0, false), // runsc wait of a warm Pod
			22: proc(22, 20, "exe", 3, 200, 0, true),   // its gofer
		}}
	b := &Host{At: t0.Add(10 * time.Second), Kubepods: ms(13000), Pods: map[string]time.Duration{"web": ms(2300)}, AcctRecords: 6,
		Procs: map[int]Proc{
			10: proc(10, 1, "kubelet", 1, 1400, 0, false),
			11: proc(11, 1, "containerd", 1, 700, 160, false),
			20: proc(20, 1, "containerd-shim", 2, 80, 420, false),
			30: proc(30, 20, "runsc", 65, 20, 0, false), // a new Pod's runsc wait
		}}
	rec := func(pid, ppid int, comm string, beginSec, endSec int, cpu int) Acct {
		return Acct{PID: pid, PPID: ppid, Comm: comm, Begin: t0.Add(-time.Minute).Add(time.Duration(beginSec) * time.Second),
			End: t0.Add(-time.Minute).Add(time.Duration(endSec) * time.Second), CPU: ms(cpu)}
	}
	recs := []Acct{
		rec(5, 11, "bridge", 0, 1, 10), // before the window
		rec(21, 20, "runsc", 3, 62, 60),
		rec(40, 20, "runsc", 61, 61, 70),
		rec(22, 20, "exe", 3, 63, 250),
		rec(41, 11, "host-local", 62, 62, 50),
		rec(42, 4000, "compile", 62, 63, 900),
	}
	at := Attribution{PIDs: map[int]string{10: Kubelet, 11: Containerd}, Pod: func(uid string) string {
		if uid == "web" {
			return WebhookPods
		}
		return ""
	}}
	w := Measure(at, a, b, recs)
	want := map[string]time.Duration{
		Kubelet:     ms(400),
		Containerd:  ms(200 + 50),     // itself, and the CNI plugin it ran
		Shims:       ms(30),           // the shim itself
		RunscHost:   ms(20 + 30 + 70), // new runsc wait, the rest of the old one, runsc state
		WebhookPods: ms(300),          // its own cgroup
		SandboxPods: ms(3000 - 300),   // kubepods less the webhook
	}
	for k, v := range want {
		if w.CPU[k] != v {
			t.Errorf("%s: got %s, want %s", k, w.CPU[k], v)
		}
	}
	if len(w.CPU) != len(want) {
		t.Errorf("components %v, want %v", w.CPU, want)
	}
	if w.Runsc != 2 {
		t.Errorf("runsc invocations %d, want 2", w.Runsc)
	}
	if w.ProcessesInPods != ms(50) {
		t.Errorf("processes in Pods %s, want 50ms (the gofer's last 50 ms)", w.ProcessesInPods)
	}
	if w.Unattributed != ms(900) {
		t.Errorf("unattributed %s, want the compiler's 900ms", w.Unattributed)
	}
	// containerd's cutime grew 60 ms for its 50 ms CNI plugin, the shim's 380 ms for its runsc wait, runsc
	// state and the sandbox process it reaped (60+70+250 ms by their exit figures).
	if w.ReapedProc != ms(60+380) || w.ReapedExit != ms(50+60+70+250) {
		t.Errorf("reaped: /proc %s, exit figures %s", w.ReapedProc, w.ReapedExit)
	}
	if w.LostPods != 0 {
		t.Errorf("lost Pods %d", w.LostPods)
	}

	idle := map[string]float64{Kubelet: 0.01, SandboxPods: 0.1}
	if got := PerCall(w, idle, Kubelet, 2); got < 0.1499 || got > 0.1501 {
		t.Errorf("kubelet per call %.4f, want (0.4-0.01*10)/2 = 0.15", got)
	}
	if got := MeanRates(map[string]float64{Vault: 0.2}, map[string]float64{Vault: 0.4})[Vault]; got < 0.2999 || got > 0.3001 {
		t.Errorf("mean rate %.4f", got)
	}
}

// taskstats-pid.bin is a single-threaded process's exit message, taskstats-tgid.bin the last thread of a
// Go program (the go command): the thread and the whole group, read from the node's kernel.
func TestParseTaskstats(t *testing.T) {
	for _, tc := range []struct {
		file string
		want []TaskExit
	}{
		{"taskstats-pid.bin", []TaskExit{{PID: 18993}}},
		{"taskstats-tgid.bin", []TaskExit{{PID: 18998, CPU: 60100}, {TGID: 18995, CPU: 4632580}}},
	} {
		got, err := ParseTaskstats([]byte(read(t, tc.file)))
		if err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		if len(got) != len(tc.want) {
			t.Fatalf("%s: got %+v, want %+v", tc.file, got, tc.want)
		}
		for i := range got {
			// The fixture's CPU is exact to the nanosecond; the table rounds to 10 ns.
			if got[i].PID != tc.want[i].PID || got[i].TGID != tc.want[i].TGID || (got[i].CPU/10*10) != tc.want[i].CPU {
				t.Errorf("%s: got %+v, want %+v", tc.file, got[i], tc.want[i])
			}
		}
	}
	b := []byte(read(t, "taskstats-tgid.bin"))
	if _, err := ParseTaskstats(b[:len(b)-40]); err == nil {
		t.Error("a truncated message accepted")
	}
}

// The exit figure from taskstats replaces the accounting record's rounded one; a record without a
// message keeps its own and is counted.
func TestMeasureUsesTaskstats(t *testing.T) {
	t0 := time.Unix(1796205000, 0)
	a := &Host{At: t0, Procs: map[int]Proc{}, Pods: map[string]time.Duration{}}
	b := &Host{At: t0.Add(time.Second), Procs: map[int]Proc{}, Pods: map[string]time.Duration{}, AcctRecords: 2}
	recs := []Acct{{PID: 7, PPID: 3, Comm: "runsc", Begin: t0, End: t0, CPU: 0}, {PID: 8, PPID: 3, Comm: "runsc", Begin: t0, End: t0, CPU: 10 * time.Millisecond}}
	at := Attribution{Pod: func(string) string { return "" }, ExitCPU: func(pid int, _ time.Time) (time.Duration, bool) {
		return 12 * time.Millisecond, pid == 7
	}}
	w := Measure(at, a, b, recs)
	if w.CPU[RunscHost] != 22*time.Millisecond || w.Runsc != 2 || w.Exited != 2 || w.NoTaskstats != 1 {
		t.Errorf("got %+v", w)
	}
}
