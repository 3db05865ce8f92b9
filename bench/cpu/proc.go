// Package cpu measures, per component, the CPU time the local cluster spends while the benchmarks drive
// tool calls through it (make bench-cost, and bench-e2e's concurrent line). It reads three kernel sources
// and estimates nothing:
//
//   - /proc/<pid>/stat of every live process: its own user+system time (utime+stime), and the time of the
//     children it has reaped (cutime+cstime, used only to check the process accounting below);
//   - the CPU counter of the kubelet's Pod cgroups (cpuacct.usage on cgroup v1, usage_usec in cpu.stat on
//     v2), which is hierarchical, so the parent keeps the time of Pods that are gone: the sandbox Pods'
//     Sentry and gofers are measured there;
//   - BSD process accounting (acct(2), v3 records): one record per process that exits, with its command
//     name and parent, so the short-lived host processes (the shims' runsc invocations, CNI plugins,
//     iptables) are named and counted one by one;
//   - the kernel's taskstats exit messages (generic netlink), for the CPU of each process that exits: the
//     scheduler's runtime in nanoseconds, where the accounting record's own figure is tick-sampled and
//     rounded down to 10 ms (taskstats.go says by how much that misses).
//
// It is benchmark code, not product code: it trusts the host it runs on and prints figures.
package cpu

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ClockTick is the unit of the times in /proc/<pid>/stat (USER_HZ, 100 on every Linux architecture Go
// supports for this project).
const ClockTick = 10 * time.Millisecond

// Stat is what the benchmark needs from one /proc/<pid>/stat line.
type Stat struct {
	PID, PPID int
	Comm      string
	// Start is the process's start time in clock ticks since boot (field 22); with the PID it names one
	// process, since PIDs are reused.
	Start uint64
	// Self is utime+stime: the CPU the process itself (all its threads) has used.
	Self time.Duration
	// Children is cutime+cstime: the CPU of the children it has waited for, and of their reaped children.
	Children time.Duration
}

// ParseStat parses one /proc/<pid>/stat line. The command name is in parentheses and may itself hold
// spaces and parentheses, so the fields after it are found from the last ')'.
func ParseStat(line string) (Stat, error) {
	open, end := strings.IndexByte(line, '('), strings.LastIndexByte(line, ')')
	if open < 0 || end < open {
		return Stat{}, fmt.Errorf("stat line without (comm): %.40q", line)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line[:open]))
	if err != nil {
		return Stat{}, fmt.Errorf("stat pid: %w", err)
	}
	// f[0] is field 3 (state); field n is f[n-3].
	f := strings.Fields(line[end+1:])
	if len(f) < 20 {
		return Stat{}, fmt.Errorf("stat line of pid %d has %d fields after comm, want at least 20", pid, len(f))
	}
	num := func(field int) (uint64, error) {
		v, err := strconv.ParseUint(f[field-3], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("stat pid %d field %d: %w", pid, field, err)
		}
		return v, nil
	}
	var v [6]uint64
	for i, field := range []int{4, 14, 15, 16, 17, 22} {
		if v[i], err = num(field); err != nil {
			return Stat{}, err
		}
	}
	return Stat{
		PID: pid, PPID: int(v[0]), Comm: line[open+1 : end], Start: v[5],
		Self:     time.Duration(v[1]+v[2]) * ClockTick,
		Children: time.Duration(v[3]+v[4]) * ClockTick,
	}, nil
}

// ParseBootTime reads btime (seconds since the epoch) from /proc/stat, to turn a Stat's Start into wall time.
func ParseBootTime(procStat string) (int64, error) {
	for _, l := range strings.Split(procStat, "\n") {
		if v, ok := strings.CutPrefix(l, "btime "); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("/proc/stat has no btime line")
}
