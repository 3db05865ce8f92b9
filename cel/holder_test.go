package cel

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

func TestHolderSwapsAtomically(t *testing.T) {
	var h Holder
	if h.Load() != nil {
		t.Fatal("zero Holder must hold no program")
	}
	versions := make([]*Program, 10)
	for i := range versions {
		versions[i] = mustCompile(t, []Rule{{Path: "p[0]", Name: "r", Expression: "true"}})
		versions[i].version = fmt.Sprintf("v%d", i)
	}
	h.Store(versions[0])

	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for !stop.Load() {
				p := h.Load()
				if p == nil || p.Version() == "" {
					t.Error("Load returned no program while versions were swapped")
					return
				}
			}
		})
	}
	for i := range 1000 {
		h.Store(versions[i%len(versions)])
	}
	stop.Store(true)
	wg.Wait()

	h.Store(versions[3])
	h.Store(nil)
	if got := h.Load(); got != versions[3] {
		t.Fatalf("Store(nil) replaced the program in service: got %v", got.Version())
	}
}

// TestHolderKeepsProgramOnFailedCompile shows the intended use: a policy that does not
// compile never reaches Store.
func TestHolderKeepsProgramOnFailedCompile(t *testing.T) {
	var h Holder
	h.Store(compileDefault(t))
	if p, err := Compile([]Rule{{Path: "spec.admissionRules[0]", Name: "x", Expression: "object."}}, "broken"); err == nil {
		h.Store(p)
		t.Fatal("broken policy compiled")
	}
	if h.Load().Version() != "default" {
		t.Fatalf("program in service = %q, want default", h.Load().Version())
	}
}
