// Command runscargs tells the host's runsc invocations apart by subcommand (state, create, start, wait,
// events, kill, delete, ...), which process accounting cannot: its records hold only the command name.
// It scans /proc every millisecond for processes named runsc for the given duration and prints how many
// of each subcommand it saw. It is a diagnostic for the runsc lever of issue 23, run beside a benchmark:
// it misses invocations shorter than its scan and costs about half a core while it runs, so its counts
// are a lower bound and it never runs inside make bench-cost's measured windows.
package main

import (
	"bytes"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

func main() {
	d := 30 * time.Second
	if len(os.Args) > 1 {
		v, err := time.ParseDuration(os.Args[1])
		if err != nil {
			fmt.Fprintf(os.Stderr, "usage: runscargs [duration]: %v\n", err)
			os.Exit(2)
		}
		d = v
	}
	seen := map[string]string{} // pid/start time -> subcommand
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(time.Millisecond) {
		scan(seen)
	}
	n := map[string]int{}
	for _, s := range seen {
		n[s]++
	}
	subs := make([]string, 0, len(n))
	for k := range n {
		subs = append(subs, k)
	}
	sort.Slice(subs, func(i, j int) bool { return n[subs[i]] > n[subs[j]] })
	fmt.Printf("runsc processes seen in %s: %d\n", d, len(seen))
	for _, k := range subs {
		fmt.Printf("  %-12s %d\n", k, n[k])
	}
}

// scan records the subcommand of every runsc process not seen before.
func scan(seen map[string]string) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		dir := "/proc/" + e.Name()
		comm, err := os.ReadFile(dir + "/comm")
		if err != nil || strings.TrimSpace(string(comm)) != "runsc" {
			continue
		}
		st, err := os.ReadFile(dir + "/stat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+1:]))
		if len(f) < 20 {
			continue
		}
		key := e.Name() + "/" + f[19] // field 22, the start time: PIDs are reused
		if _, ok := seen[key]; ok {
			continue
		}
		cl, err := os.ReadFile(dir + "/cmdline")
		if err != nil {
			continue
		}
		seen[key] = subcommand(strings.Split(string(cl), "\x00"))
	}
}

// subcommand is the first argument after the program that is not a flag (runsc's flags are --name=value).
func subcommand(argv []string) string {
	for _, a := range argv[1:] {
		if a != "" && !strings.HasPrefix(a, "-") {
			return a
		}
	}
	return "(none)"
}
