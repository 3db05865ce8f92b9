package corpus

import (
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// TestMapParallel: the results come back in the order of the input, and no more than parallel calls run at
// once (one when parallel is below one).
func TestMapParallel(t *testing.T) {
	for _, parallel := range []int{0, 1, 3} {
		var running, most atomic.Int32
		got := mapParallel([]int{1, 2, 3, 4, 5, 6, 7}, parallel, func(v int) int {
			n := running.Add(1)
			defer running.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(5 * time.Millisecond)
			return v * 10
		})
		if want := []int{10, 20, 30, 40, 50, 60, 70}; !slices.Equal(got, want) {
			t.Errorf("parallel %d: %v, want %v", parallel, got, want)
		}
		if limit := int32(max(parallel, 1)); most.Load() > limit {
			t.Errorf("parallel %d: %d calls ran at once", parallel, most.Load())
		}
	}
}
