package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/agent-sandbox/agent-sandbox/bench/cpu"
)

// runCost is make bench-cost: the CPU-seconds each call costs the node, cold and warm, and under load,
// by component, with the idle baseline (measured before and after) subtracted. Every window runs from a
// quiet node (each sandbox Pod a warm one, ready for a moment) to a quiet node, so it holds each call's
// whole Pod life: for a warm call, the claimed Pod's end and its replacement's start.
func runCost(ctx context.Context, o options, dir string, cs kubernetes.Interface, ns string) error {
	m, err := newMeter(o.state, o.adminKubeconfig, ns, dir)
	if err != nil {
		return err
	}
	defer m.close()
	quiet := func() error { return waitQuiet(ctx, cs, ns, warmSettle, 3*time.Minute) }

	if err := quiet(); err != nil {
		return err
	}
	idle1, err := m.idle(ctx, cs, o.idle)
	if err != nil {
		return err
	}

	type result struct {
		name  string
		w     window
		calls int
	}
	var results []result
	for _, mode := range []struct {
		name  string
		extra []string
	}{{"cold", []string{"--warm=false"}}, {"warm", nil}} {
		s, _, err := start(ctx, o, dir, "cost-"+mode.name, mode.extra...)
		if err != nil {
			return err
		}
		m.track(s.cmd.Process.Pid, cpu.MCPServer)
		if err := quiet(); err != nil {
			return err
		}
		a, err := m.sample(ctx)
		if err != nil {
			return err
		}
		for j := 0; j < o.costN; j++ {
			if mode.name == "warm" {
				if err := waitWarm(ctx, cs, ns, warmSettle, 2*time.Minute); err != nil {
					return err
				}
			}
			if err := call(ctx, s.c); err != nil {
				return fmt.Errorf("%s call %d: %w", mode.name, j, err)
			}
		}
		if err := quiet(); err != nil {
			return err
		}
		w, err := m.since(ctx, a)
		if err != nil {
			return err
		}
		warm, err := countWarm(s.audit)
		if err != nil {
			return err
		}
		s.c.Close()
		if mode.name == "warm" && warm < o.costN {
			fmt.Printf("(%d of the %d warm-mode calls found no ready warm Pod and ran cold)\n", o.costN-warm, o.costN)
		}
		results = append(results, result{mode.name, w, o.costN})
	}

	loaded, stats, err := loadedRun(ctx, o, dir, m, quiet)
	if err != nil {
		return err
	}
	idle2, err := m.idle(ctx, cs, o.idle)
	if err != nil {
		return err
	}

	b := newBaseline(idle1, idle2)
	r1, r2 := cpu.Sum(func(c string) float64 { return cpu.Rates(idle1.Window)[c] }), cpu.Sum(func(c string) float64 { return cpu.Rates(idle2.Window)[c] })
	fmt.Printf("\nidle baseline (cluster at rest, warm pool full, the benchmark polling as it does between calls): %.3f cores before the calls, %.3f after"+
		" (%s each); their mean, %.3f cores, is subtracted component by component; other processes on the machine (not counted) %.2f and %.2f cores\n\n",
		r1, r2, o.idle, (r1+r2)/2, idle1.Unattributed.Seconds()/idle1.Duration.Seconds(), idle2.Unattributed.Seconds()/idle2.Duration.Seconds())
	for _, r := range results {
		fmt.Printf("cpu per call %s %.3f CPU-s\n", r.name, b.perCall(r.w, r.calls))
		b.printBreakdown(r.w, r.calls)
		fmt.Println()
	}
	if stats.ok > 0 {
		fmt.Printf("cpu per call loaded %.3f CPU-s (%d concurrent callers, MCP --max-concurrency %d: %d calls in %s, %d calls/min, %d errors)\n",
			b.perCall(loaded, int(stats.ok)), o.concurrent, o.maxConcurrency, stats.ok, stats.elapsed.Round(time.Second),
			int(float64(stats.ok)/stats.elapsed.Minutes()), stats.failed)
		b.printBreakdown(loaded, int(stats.ok))
	}
	if stats.firstErr != "" {
		fmt.Printf("  first error: %s\n", stats.firstErr)
	}
	return nil
}

type loadStats struct {
	ok, failed int64
	elapsed    time.Duration
	firstErr   string
}

// loadedRun runs o.concurrent callers for o.duration against one MCP server, from a quiet node until the
// node is quiet again, and measures that window.
func loadedRun(ctx context.Context, o options, dir string, m *meter, quiet func() error) (window, loadStats, error) {
	var st loadStats
	if o.concurrent <= 0 {
		return window{}, st, nil
	}
	s, _, err := start(ctx, o, dir, "cost-loaded", "--max-concurrency", strconv.Itoa(o.maxConcurrency))
	if err != nil {
		return window{}, st, err
	}
	defer s.c.Close()
	m.track(s.cmd.Process.Pid, cpu.MCPServer)
	if err := quiet(); err != nil {
		return window{}, st, err
	}
	a, err := m.sample(ctx)
	if err != nil {
		return window{}, st, err
	}
	st = hammer(ctx, s, o.concurrent, o.duration)
	if err := quiet(); err != nil {
		return window{}, st, err
	}
	w, err := m.since(ctx, a)
	return w, st, err
}

// hammer runs n callers in a loop for d.
func hammer(ctx context.Context, s *server, n int, d time.Duration) loadStats {
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	deadline := time.Now().Add(d)
	t0 := time.Now()
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				if err := call(ctx, s.c); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	st := loadStats{ok: ok.Load(), failed: failed.Load(), elapsed: time.Since(t0)}
	st.firstErr, _ = firstErr.Load().(string)
	return st
}

// countWarm counts the calls an audit log says were served by a warm Pod.
func countWarm(file string) (int, error) {
	_, warm, err := phasesOf(file)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", file, err)
	}
	return warm, nil
}

// concurrentRun is bench-e2e's throughput run against s, with its CPU-seconds per call when it can measure
// them (root for process accounting, -idle > 0): an idle baseline first, then the components' CPU from a
// quiet node to a quiet node, less the baseline, over the calls that succeeded.
func concurrentRun(ctx context.Context, o options, dir string, cs kubernetes.Interface, ns string, s *server) (loadStats, string, string, error) {
	if o.idle <= 0 {
		return hammer(ctx, s, o.concurrent, o.duration), "n/a", "not measured (-idle 0)", nil
	}
	m, err := newMeter(o.state, o.adminKubeconfig, ns, dir)
	if err != nil {
		return hammer(ctx, s, o.concurrent, o.duration), "n/a", "not measured: " + err.Error(), nil
	}
	defer m.close()
	m.track(s.cmd.Process.Pid, cpu.MCPServer)
	quiet := func() error { return waitQuiet(ctx, cs, ns, warmSettle, 3*time.Minute) }
	if err := quiet(); err != nil {
		return loadStats{}, "", "", err
	}
	idle, err := m.idle(ctx, cs, o.idle)
	if err != nil {
		return loadStats{}, "", "", err
	}
	a, err := m.sample(ctx)
	if err != nil {
		return loadStats{}, "", "", err
	}
	st := hammer(ctx, s, o.concurrent, o.duration)
	if err := quiet(); err != nil {
		return st, "", "", err
	}
	w, err := m.since(ctx, a)
	if err != nil {
		return st, "", "", err
	}
	if st.ok == 0 {
		return st, "n/a", "no call succeeded", nil
	}
	b := newBaseline(idle)
	idleCores := cpu.Sum(func(c string) float64 { return b.rates[c] })
	return st, fmt.Sprintf("%.3f CPU-s", b.perCall(w, int(st.ok))),
		fmt.Sprintf("the components' CPU from a quiet node to a quiet node (%s), less a %s idle baseline of %.3f cores, over the %d calls that succeeded; make bench-cost breaks it down",
			w.Duration.Round(time.Second), o.idle, idleCores, st.ok), nil
}
