package audit

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// childLogEnv and childIDEnv turn the test binary into a writer process for TestKilledWriters.
const (
	childLogEnv = "AUDIT_TEST_CHILD_LOG"
	childIDEnv  = "AUDIT_TEST_CHILD_ID"
)

// TestKilledWriters runs two real writer processes on one file, kills both with SIGKILL mid-stream, and
// checks that the chain verifies (after Open's recovery, if a line was torn) and that no event a writer
// was told had been written is missing.
func TestKilledWriters(t *testing.T) {
	if path := os.Getenv(childLogEnv); path != "" {
		runChildWriter(path, os.Getenv(childIDEnv))
		return
	}
	if testing.Short() {
		t.Skip("spawns processes")
	}
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	ids := []string{"w1", "w2"}
	// acked is filled in before any reader goroutine starts: the readers write it under mu, so an
	// unlocked write here, while the first writer's reader already runs, would race with them.
	var mu sync.Mutex
	acked := map[string]int{}
	for _, id := range ids {
		acked[id] = -1
	}
	var cmds []*exec.Cmd
	var readers sync.WaitGroup
	// The writers append until they are killed. Kill them on every way out of the test (a t.Fatal
	// included), or they go on filling the disk after the test has ended.
	killed := false
	stop := func() {
		if killed {
			return
		}
		killed = true
		for _, cmd := range cmds {
			_ = cmd.Process.Kill()
		}
		// Drain the acknowledgements first: Wait closes the pipes and would drop unread ones.
		readers.Wait()
		for _, cmd := range cmds {
			_ = cmd.Wait()
		}
	}
	t.Cleanup(stop)
	for _, id := range ids {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKilledWriters$")
		cmd.Env = append(os.Environ(), childLogEnv+"="+path, childIDEnv+"="+id)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
		readers.Go(func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				n, ok := strings.CutPrefix(sc.Text(), "acked ")
				if i, err := strconv.Atoi(n); ok && err == nil {
					mu.Lock()
					acked[id] = i
					mu.Unlock()
				}
			}
		})
	}

	// Wait on the writers' acknowledgements, not on the file: reading a file that two writers grow
	// without pause may never reach its end, and then the deadline is never checked.
	const wantLines = 400
	deadline := time.Now().Add(60 * time.Second)
	for {
		mu.Lock()
		total := 0
		for _, i := range acked {
			total += i + 1
		}
		mu.Unlock()
		if total >= wantLines {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("writers acknowledged only %d lines in 60s", total)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()

	// The host's clock, as the killed writers had: processes on one host share it, and Verify refuses a
	// line dated far before the lines ahead of it.
	l := openLog(t, path, WithClock(time.Now))
	if err := l.Write(Event{RequestID: "after", Name: EventToolRequest}); err != nil {
		t.Fatal(err)
	}
	sum, err := VerifyFile(path)
	if err != nil {
		t.Fatalf("Verify after kill: %v", err)
	}
	got := map[string][]int{}
	for _, r := range readAll(t, path) {
		if i, ok := r.Fields["i"].(float64); ok {
			got[r.RequestID] = append(got[r.RequestID], int(i))
		}
	}
	for _, id := range ids {
		for want, i := range got[id] {
			if i != want {
				t.Fatalf("%s: event %d missing (found %d instead)", id, want, i)
			}
		}
		if n := len(got[id]); n <= acked[id] {
			t.Errorf("%s: acknowledged event %d but the log has only %d events", id, acked[id], n)
		}
	}
	t.Logf("%d lines; acknowledged w1=%d w2=%d", sum.Lines, acked["w1"], acked["w2"])
}

// runChildWriter appends events until it is killed, printing each acknowledged index.
func runChildWriter(path, id string) {
	l, err := Open(path, WithSync(false))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	pad := strings.Repeat("x", 4096)
	for i := 0; ; i++ {
		if err := l.Write(Event{RequestID: id, Name: EventToolRequest, Fields: map[string]any{"i": i, "pad": pad}}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Printf("acked %d\n", i)
	}
}
