package sandbox

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/watch"
)

// closingView lists once and then opens watches that the "server" closes at once, as a kube-apiserver that
// shuts down closes its watches cleanly.
type closingView struct{}

func (closingView) list(context.Context) (coldEvent, string, error) {
	return coldEvent{Kind: evPod}, "1", nil
}
func (closingView) watch(context.Context, string) (watch.Interface, error) {
	w := watch.NewFake()
	w.Stop() // closes its result channel
	return w, nil
}
func (closingView) apply(watch.Event) (coldEvent, bool) { return coldEvent{}, true }
func (closingView) what() string                        { return "list the Pods of Job j" }

// TestKeepReportsAWatchClosedEarly: a watch the API server closed long before its timeout reaches the state
// machine as a transient read failure — the sign of a restart that lets it ride out the new server's 403s
// (chaos "kube-apiserver restarted during a call" once failed on such a 403, the closed watch unreported).
func TestKeepReportsAWatchClosedEarly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := &Runner{retry: backoff{first: time.Millisecond, limit: time.Millisecond}}
	var got error
	r.keep(ctx, closingView{}, func(ev coldEvent) bool {
		if ev.Kind == evReadFailed {
			got = ev.Err
			return false
		}
		return true
	})
	if !errors.Is(got, errWatchEnded) || !transientAPIError(got) {
		t.Fatalf("a watch closed early was reported as %v, want errWatchEnded (transient)", got)
	}
}

func TestWatchEnd(t *testing.T) {
	ctx := context.Background()
	if err := watchEnd(ctx, watchTimeout); err != nil {
		t.Errorf("a watch that lasted its timeout ended with %v", err)
	}
	if err := watchEnd(ctx, 2*time.Second); !errors.Is(err, errWatchEnded) {
		t.Errorf("a watch closed after 2 s ended with %v, want errWatchEnded", err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if err := watchEnd(done, time.Second); err != nil {
		t.Errorf("a watch ended with its call ended with %v", err)
	}
}
