package sandbox

import (
	"context"
	"fmt"
	"slices"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// follow runs a cold call's state machine (coldState.next) until the run ends: it watches the Job and its
// Pod, follows the credential agent's log once the agent runs, and feeds what they report, in the order it
// arrives, to next, whose actions it carries out. It returns how the run ended; res gets the exit code and
// the phases' timings, also when ctx ends first.
func (r *Runner) follow(ctx context.Context, job *batchv1.Job, res *Result, progress func(Stage)) error {
	s, err := r.drive(ctx, job, nil, progress)
	s.fill(res)
	return err
}

// drive is follow's loop; observe, when not nil, sees each event before the state machine does (the
// recorder of testdata/cold uses it). It returns the last state and how the run ended.
func (r *Runner) drive(ctx context.Context, job *batchv1.Job, observe func(coldEvent), progress func(Stage)) (coldState, error) {
	s := newColdState(job, time.Now(), r.OutageTolerance)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	events := make(chan coldEvent)
	send := func(ev coldEvent) bool {
		ev.At = time.Now()
		select {
		case events <- ev:
			return true
		case <-wctx.Done():
			return false
		}
	}
	go r.keep(wctx, &podView{c: r.Client, w: r.streams(), ns: r.Namespace, job: job.Name}, send)
	go r.keep(wctx, &jobView{c: r.Client, w: r.streams(), ns: r.Namespace, job: job.Name}, send)
	for {
		var ev coldEvent
		select {
		case <-ctx.Done():
			return s, ctx.Err()
		case ev = <-events:
		}
		if ctx.Err() != nil {
			return s, ctx.Err()
		}
		if observe != nil {
			observe(ev)
		}
		var acts []coldAction
		s, acts = s.next(ev)
		for _, a := range acts {
			if a.FollowAgent != "" {
				// Once the credential agent runs, its log is followed as a stream: the agent reports the
				// result right after it revoked, and the kubelet takes another relist or two to publish
				// that the agent exited.
				r.watchResult(wctx, a.FollowAgent, func(k coldEventKind) { send(coldEvent{Kind: k}) })
			}
			if a.ReadPod {
				go r.readPod(wctx, job.Name, send)
			}
			if a.Stage != "" {
				progress(a.Stage)
			}
		}
		if s.over() {
			return s, s.err
		}
	}
}

// readPod reads the Job's Pod once and reports it (or the failed read, which the state machine judges as
// any other: the Pod is read again by its watch meanwhile).
func (r *Runner) readPod(ctx context.Context, job string, send func(coldEvent) bool) {
	pod, err := r.pod(ctx, job)
	switch {
	case err == nil:
		send(coldEvent{Kind: evPod, Pod: pod})
	case apierrors.IsNotFound(err):
		send(coldEvent{Kind: evPod})
	case ctx.Err() == nil:
		send(coldEvent{Kind: evReadFailed, What: "list the Pods of Job " + job, Err: err})
	}
}

// streams is the client for requests that last as long as a call (watches, log follows).
func (r *Runner) streams() kubernetes.Interface {
	if r.Streams != nil {
		return r.Streams
	}
	return r.Client
}

// coldRetry is the backoff of the cold call's watches: an API server that is back is noticed within a
// second.
var coldRetry = backoff{first: 100 * time.Millisecond, limit: time.Second}

// watchTimeout is how long one watch lasts before the API server ends it and it is listed and watched
// again. The watch's client has no request timeout (it is the log streams' client), so the runner also
// gives up on a watch watchGrace after that: a connection that died without a word (no reset, no close)
// is noticed as a request timeout was before.
const (
	watchTimeout = time.Minute
	watchGrace   = 10 * time.Second
)

// view is what a keep loop keeps current: objects listed, then watched from the list's version.
type view interface {
	// list reads the objects and returns the event that reports them and the list's resource version.
	list(ctx context.Context) (coldEvent, string, error)
	watch(ctx context.Context, rv string) (watch.Interface, error)
	// apply folds a watch event into the view and returns the event that reports it; false means the watch
	// is to be listed again (an ERROR event: its version is too old, say).
	apply(watch.Event) (coldEvent, bool)
	// what names the reads in an error ("list the Pods of Job j").
	what() string
}

// keep keeps v current for the state machine, as client-go's reflector does for an informer: list,
// report, watch from the list's version and report each change, and list again when the watch ends. A
// request that fails is reported (the state machine tells an outage to ride out from a final failure) and
// tried again after a backoff, until ctx ends or send refuses.
func (r *Runner) keep(ctx context.Context, v view, send func(coldEvent) bool) {
	b := r.retry
	if b.first == 0 {
		b = coldRetry
	}
	for ctx.Err() == nil {
		ev, rv, err := v.list(ctx)
		if err == nil && send(ev) {
			err = r.watchOnce(ctx, v, rv, send, &b)
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil && !send(coldEvent{Kind: evReadFailed, What: v.what(), Err: err}) {
			return
		}
		if b.wait(ctx) != nil {
			return
		}
	}
}

// errWatchEnded is the cause of a watch the API server closed before its timeout: an API server that shuts
// down closes its watches cleanly, so this is often the only sign of a restart that the next list, answered
// by the new server before its authorization cache is filled, follows with a 403.
var errWatchEnded = fmt.Errorf("%w: the API server closed the watch before its timeout", errStreamEnded)

// watchOnce watches v from rv and reports every change until the watch ends (nil; errWatchEnded when the
// server closed it early) or cannot be opened.
func (r *Runner) watchOnce(ctx context.Context, v view, rv string, send func(coldEvent) bool, b *backoff) error {
	ctx, cancel := context.WithTimeout(ctx, watchTimeout+watchGrace)
	defer cancel()
	w, err := v.watch(ctx, rv)
	if err != nil {
		return err
	}
	defer w.Stop()
	opened := time.Now()
	for e := range w.ResultChan() {
		ev, ok := v.apply(e)
		if !ok {
			return nil
		}
		b.reset()
		if !send(ev) {
			return nil
		}
	}
	return watchEnd(ctx, time.Since(opened))
}

// watchEnd is how a watch that lasted d ended: as expected at its timeout (or with the call), or early.
func watchEnd(ctx context.Context, d time.Duration) error {
	if ctx.Err() != nil || d >= watchTimeout-time.Second {
		return nil
	}
	return errWatchEnded
}

// podView is the Pod of a cold call's Job. The Job has one Pod; were there more, the first by name counts,
// as in a list.
type podView struct {
	c, w kubernetes.Interface
	ns   string
	job  string
	pods map[string]*corev1.Pod
}

func (v *podView) what() string { return "list the Pods of Job " + v.job }

// selector picks the Job's Pods by the job controller's label, as before (job-name, not its newer
// batch.kubernetes.io/job-name twin).
func (v *podView) selector() string { return "job-name=" + v.job }

func (v *podView) list(ctx context.Context) (coldEvent, string, error) {
	l, err := v.c.CoreV1().Pods(v.ns).List(ctx, metav1.ListOptions{LabelSelector: v.selector()})
	if err != nil {
		return coldEvent{}, "", err
	}
	v.pods = map[string]*corev1.Pod{}
	for i := range l.Items {
		v.pods[l.Items[i].Name] = &l.Items[i]
	}
	return v.event(), l.ResourceVersion, nil
}

func (v *podView) watch(ctx context.Context, rv string) (watch.Interface, error) {
	return v.w.CoreV1().Pods(v.ns).Watch(ctx, metav1.ListOptions{LabelSelector: v.selector(), ResourceVersion: rv,
		TimeoutSeconds: ptr.To(int64(watchTimeout.Seconds()))})
}

func (v *podView) apply(e watch.Event) (coldEvent, bool) {
	p, ok := e.Object.(*corev1.Pod)
	if !ok {
		return coldEvent{}, false
	}
	switch e.Type {
	case watch.Added, watch.Modified:
		v.pods[p.Name] = p
	case watch.Deleted:
		delete(v.pods, p.Name)
	default:
		return coldEvent{}, false
	}
	return v.event(), true
}

func (v *podView) event() coldEvent {
	names := make([]string, 0, len(v.pods))
	for n := range v.pods {
		names = append(names, n)
	}
	slices.Sort(names)
	ev := coldEvent{Kind: evPod}
	if len(names) > 0 {
		ev.Pod = v.pods[names[0]]
	}
	return ev
}

// jobView is a cold call's Job. One that is gone (deleted under the call) is a read that failed for good.
type jobView struct {
	c, w kubernetes.Interface
	ns   string
	job  string
}

func (v *jobView) what() string { return "read Job " + v.job }

func (v *jobView) list(ctx context.Context) (coldEvent, string, error) {
	j, err := v.c.BatchV1().Jobs(v.ns).Get(ctx, v.job, metav1.GetOptions{})
	if err != nil {
		return coldEvent{}, "", err
	}
	return coldEvent{Kind: evJob, Job: j}, j.ResourceVersion, nil
}

func (v *jobView) watch(ctx context.Context, rv string) (watch.Interface, error) {
	return v.w.BatchV1().Jobs(v.ns).Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", v.job).String(),
		ResourceVersion: rv, TimeoutSeconds: ptr.To(int64(watchTimeout.Seconds()))})
}

func (v *jobView) apply(e watch.Event) (coldEvent, bool) {
	j, ok := e.Object.(*batchv1.Job)
	if !ok {
		return coldEvent{}, false
	}
	switch e.Type {
	case watch.Added, watch.Modified:
		return coldEvent{Kind: evJob, Job: j}, true
	case watch.Deleted:
		return coldEvent{Kind: evReadFailed, What: v.what(), Err: apierrors.NewNotFound(batchv1.Resource("jobs"), v.job)}, true
	}
	return coldEvent{}, false
}
