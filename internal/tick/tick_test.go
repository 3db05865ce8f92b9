package tick

import (
	"context"
	"testing"
	"time"
)

// TestEvery: f runs on each tick, and Every returns once ctx ends (here cancelled from the third call),
// calling f at most once more (a tick due with the end).
func TestEvery(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := 0
	Every(ctx, time.Millisecond, func() {
		calls++
		if calls == 3 {
			cancel()
		}
	})
	if calls != 3 && calls != 4 {
		t.Fatalf("f ran %d times, want 3 (or 4, a tick due with the end)", calls)
	}
}

// TestEveryStopsAtOnce: with ctx already done, f never runs.
func TestEveryStopsAtOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	Every(ctx, time.Hour, func() { t.Error("f ran after ctx ended") })
}
