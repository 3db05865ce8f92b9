package cpu

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ParseCPUAcctUsage parses cgroup v1's cpuacct.usage (nanoseconds, all CPUs).
func ParseCPUAcctUsage(s string) (time.Duration, error) {
	v, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("cpuacct.usage: %w", err)
	}
	return time.Duration(v), nil
}

// ParseCPUStat reads usage_usec from cgroup v2's cpu.stat.
func ParseCPUStat(s string) (time.Duration, error) {
	for _, l := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(l, "usage_usec "); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("cpu.stat usage_usec: %w", err)
			}
			return time.Duration(n) * time.Microsecond, nil
		}
	}
	return 0, fmt.Errorf("cpu.stat has no usage_usec line")
}

// CPUCgroup returns the path, within its hierarchy, of the cgroup that accounts a process's CPU, from its
// /proc/<pid>/cgroup: the v1 cpuacct controller's line when there is one (a hybrid host), else the v2 line.
func CPUCgroup(procCgroup string) string {
	v2 := ""
	for _, l := range strings.Split(procCgroup, "\n") {
		parts := strings.SplitN(l, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "cpuacct" {
				return parts[2]
			}
		}
		if parts[0] == "0" && parts[1] == "" {
			v2 = parts[2]
		}
	}
	return v2
}

// PodUID returns the Pod UID that names a kubelet Pod cgroup (".../pod<uid>" with the cgroupfs driver,
// "...-pod<uid_with_underscores>.slice" with the systemd one), or "" for any other cgroup.
func PodUID(cgroupPath string) string {
	for _, seg := range strings.Split(cgroupPath, "/") {
		if u, ok := strings.CutPrefix(seg, "pod"); ok && len(u) == 36 {
			return u
		}
		if i := strings.LastIndex(seg, "-pod"); i >= 0 && strings.HasSuffix(seg, ".slice") {
			if u := seg[i+4 : len(seg)-len(".slice")]; len(u) == 36 {
				return strings.ReplaceAll(u, "_", "-")
			}
		}
	}
	return ""
}

// Cgroups reads the kubelet's Pod cgroups on this host.
type Cgroups struct {
	// Kubepods is the directory of the kubelet's top cgroup (all Pods) in the CPU hierarchy.
	Kubepods string
	v2       bool
}

// FindCgroups locates the kubelet's Pod cgroups under root (normally /sys/fs/cgroup): v1's cpuacct
// hierarchy first (a hybrid host accounts CPU there), else the unified hierarchy.
func FindCgroups(root string) (*Cgroups, error) {
	for _, c := range []struct {
		dir string
		v2  bool
	}{
		{filepath.Join(root, "cpuacct", "kubepods"), false},
		{filepath.Join(root, "cpuacct", "kubepods.slice"), false},
		{filepath.Join(root, "cpu,cpuacct", "kubepods"), false},
		{filepath.Join(root, "kubepods"), true},
		{filepath.Join(root, "kubepods.slice"), true},
	} {
		f := "cpuacct.usage"
		if c.v2 {
			f = "cpu.stat"
		}
		if _, err := os.Stat(filepath.Join(c.dir, f)); err == nil {
			return &Cgroups{Kubepods: c.dir, v2: c.v2}, nil
		}
	}
	return nil, fmt.Errorf("no kubelet Pod cgroup (kubepods) with a CPU counter under %s", root)
}

// Usage reads the CPU counter of the cgroup directory dir.
func (c *Cgroups) Usage(dir string) (time.Duration, error) {
	if c.v2 {
		b, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
		if err != nil {
			return 0, err
		}
		return ParseCPUStat(string(b))
	}
	b, err := os.ReadFile(filepath.Join(dir, "cpuacct.usage"))
	if err != nil {
		return 0, err
	}
	return ParseCPUAcctUsage(string(b))
}

// Pods reads the CPU counter of every Pod cgroup (kubepods/pod<uid>, kubepods/<qos>/pod<uid>), by Pod UID.
func (c *Cgroups) Pods() (map[string]time.Duration, error) {
	out := map[string]time.Duration{}
	for _, pattern := range []string{"*pod*", "*/*pod*"} {
		dirs, err := filepath.Glob(filepath.Join(c.Kubepods, pattern))
		if err != nil {
			return nil, err
		}
		for _, d := range dirs {
			uid := PodUID(filepath.Base(d))
			if uid == "" {
				continue
			}
			u, err := c.Usage(d)
			if err != nil {
				continue // the Pod went away between the glob and the read
			}
			out[uid] = u
		}
	}
	return out, nil
}
