package sandbox

import (
	"cmp"
	"context"
	"errors"
	"io"
	"net"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// DefaultOutageTolerance is how long a call in flight waits for an API server that stopped answering
// before it fails with ErrClusterDown: the design rides out a restart of up to two minutes, and a restarted
// server needs a few more seconds before it is ready.
const DefaultOutageTolerance = 2*time.Minute + 15*time.Second

// transientAPIError reports whether a request failed because the API server is away or not ready — stopped,
// restarting, shutting down (a 429 with Retry-After once it drains), overloaded — so that the same request a
// little later may succeed; so is a log stream the server ended while its Pod still runs. A refusal
// (forbidden, invalid, not found) is not transient.
func transientAPIError(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, errStreamEnded) || isConnectionError(err) || errors.Is(err, io.ErrUnexpectedEOF) || utilnet.IsProbableEOF(err) ||
		utilnet.IsConnectionReset(err) || utilnet.IsConnectionRefused(err) || utilnet.IsHTTP2ConnectionLost(err) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	return apierrors.IsTooManyRequests(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsServerTimeout(err) ||
		apierrors.IsTimeout(err) || apierrors.IsInternalError(err) || apierrors.IsUnexpectedServerError(err)
}

// outage follows one stretch of an unreachable API server during a call. The first transient error starts
// it; a success ends it. While it lasts, and for startupGrace after the last transient error, the refusals
// a freshly started API server gives before its authentication and authorization caches are filled (401,
// 403) count as transient too: before the outage the same identity was allowed, and nothing about it
// changed meanwhile. (Seen on the local cluster: a 403 for the MCP server's Pod list seconds after the
// restarted server had answered a read.)
type outage struct {
	limit time.Duration
	now   func() time.Time
	since time.Time
	// last is when the last transient error was seen (kept when the outage ends).
	last time.Time
}

// startupGrace is how long after an outage a 401 or 403 is still taken for a server that is starting up.
const startupGrace = 30 * time.Second

func newOutage(limit time.Duration) *outage {
	if limit <= 0 {
		limit = DefaultOutageTolerance
	}
	return &outage{limit: limit, now: time.Now}
}

// ride reports whether err is to be ridden out (the request tried again later); false means it is final:
// not transient, or the outage has lasted longer than the limit.
func (o *outage) ride(err error) bool { return o.rideAt(o.now(), err) }

// rideAt is ride for an error seen at now.
func (o *outage) rideAt(now time.Time, err error) bool {
	transient := transientAPIError(err)
	recent := !o.since.IsZero() || (!o.last.IsZero() && now.Sub(o.last) < startupGrace)
	if !transient && recent && (apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err)) {
		transient = true
	}
	if !transient {
		return false
	}
	if o.since.IsZero() {
		o.since = now
	}
	o.last = now
	return now.Sub(o.since) < o.limit
}

// ok records a request that succeeded: the outage, if any, is over.
func (o *outage) ok() { o.since = time.Time{} }

// lasted is how long the current outage has lasted (zero when there is none).
func (o *outage) lasted() time.Duration { return o.lastedAt(o.now()) }

// lastedAt is how long the current outage has lasted at now.
func (o *outage) lastedAt(now time.Time) time.Duration {
	if o.since.IsZero() {
		return 0
	}
	return now.Sub(o.since)
}

// backoff is the wait before the next attempt of a request that failed transiently: first (250 ms when
// zero), doubling to limit (4 s when zero).
type backoff struct{ first, limit, next time.Duration }

func (b *backoff) wait(ctx context.Context) error {
	if b.next == 0 {
		b.next = cmp.Or(b.first, 250*time.Millisecond)
	}
	t := time.NewTimer(b.next)
	defer t.Stop()
	b.next = min(2*b.next, cmp.Or(b.limit, 4*time.Second))
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (b *backoff) reset() { b.next = 0 }

// retryAPI calls f until it succeeds, fails with an error that is not to be ridden out (returned as is), or
// the outage lasts longer than the runner's tolerance (that last error is returned).
func (r *Runner) retryAPI(ctx context.Context, f func(context.Context) error) error {
	o, b := newOutage(r.OutageTolerance), &backoff{}
	for {
		err := f(ctx)
		if err == nil || ctx.Err() != nil || !o.ride(err) {
			if err != nil && ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		if werr := b.wait(ctx); werr != nil {
			return werr
		}
	}
}
