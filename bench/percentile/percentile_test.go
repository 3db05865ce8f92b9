package percentile

import (
	"testing"
	"time"
)

func TestOf(t *testing.T) {
	d := []time.Duration{5, 1, 4, 2, 3}
	for p, want := range map[int]time.Duration{0: 1, 50: 3, 95: 4, 99: 4, 100: 5} {
		if got := Of(d, p); got != want {
			t.Errorf("Of(%v, %d) = %v, want %v", d, p, got, want)
		}
	}
	if d[0] != 5 {
		t.Errorf("Of sorted its argument: %v", d)
	}
	if got := Of([]int(nil), 50); got != 0 {
		t.Errorf("Of(nil, 50) = %d, want 0", got)
	}
	if got := Of([]int{7, 9, 8}, 50); got != 8 {
		t.Errorf("Of(ints, 50) = %d, want 8", got)
	}
}
