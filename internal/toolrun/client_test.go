package toolrun

import (
	"context"
	"net"
	"testing"
	"time"
)

func TestRetryingDial(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	c, err := retryingDial(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatalf("dial a listening address: %v", err)
	}
	c.Close()
	l.Close()
	// A refusal is an answer: no retries, no waiting.
	start := time.Now()
	if _, err := retryingDial(context.Background(), "tcp", addr); err == nil {
		t.Fatal("dial a closed port succeeded")
	}
	if d := time.Since(start); d > dialTimeout {
		t.Errorf("a refused dial took %s: it was retried", d)
	}
	// A cancelled call is not retried either.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := retryingDial(ctx, "tcp", addr); err == nil {
		t.Fatal("dial with a cancelled context succeeded")
	}
}
