// Package tick runs the periodic upkeep of the long-running commands (certificate renewal, policy reload,
// pruning) the one way they all need: first after one interval, then every interval, until the context
// ends. Standard library only.
package tick

import (
	"context"
	"time"
)

// Every calls f every interval (the first time after one interval, not at once) until ctx ends; it
// returns when ctx is done. A call of f that outlasts the interval delays the next one: ticks it missed
// are dropped, as time.Ticker drops them. A tick that is due when ctx ends may still call f once more
// (select picks either); f heeds ctx itself, as the callers' upkeep does.
func Every(ctx context.Context, interval time.Duration, f func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}
