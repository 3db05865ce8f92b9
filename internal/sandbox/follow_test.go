package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
)

// The API server as a call in flight sees it while it restarts: a refused connection (stopped), a 429 with
// Retry-After (draining), a 403 (just started, authorization caches not filled yet).
var (
	errRefused   = &connRefused{}
	errDraining  = apierrors.NewTooManyRequests("the apiserver is shutting down, please try again later", 1)
	errStarting  = apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("RBAC: not ready"))
	errForbidden = apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("the MCP server may not list pods"))
)

// connRefused is what a client gets from a port nobody listens on.
type connRefused struct{}

func (*connRefused) Error() string {
	return `Get "https://127.0.0.1:6443/api/v1/namespaces/ns/pods": dial tcp 127.0.0.1:6443: connect: connection refused`
}
func (*connRefused) Unwrap() error { return syscall.ECONNREFUSED }

// Pod states of one cold run, in order.
func podPending() *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Labels: map[string]string{"job-name": "j"}}}
}

func podAgentRunning() *corev1.Pod {
	p := podPending()
	p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: contract.CredentialAgentContainer,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}, Started: ptr.To(true)}}
	return p
}

func podToolRunning() *corev1.Pod {
	p := podAgentRunning()
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: contract.ToolContainer,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	return p
}

func podFinished(exit int32) *corev1.Pod {
	p := podPending()
	p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: contract.CredentialAgentContainer,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{}}}}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: contract.ToolContainer,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exit}}}}
	return p
}

func podAgentFailed() *corev1.Pod {
	p := podPending()
	p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: contract.CredentialAgentContainer,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: "starting\nvault login failed: permission denied"}}}}
	return p
}

func podCheckRefused() *corev1.Pod {
	p := podPending()
	p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: contract.CheckContainer,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 3, Message: "resource \"null_resource\" is not allowed"}}}}
	return p
}

func jobRunning() *batchv1.Job {
	return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "j", Namespace: "ns"}}
}

func jobFailed(reason string) *batchv1.Job {
	j := jobRunning()
	j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: reason}}
	return j
}

// step is what one read returns: an object or an error.
type step struct {
	pod *corev1.Pod
	job *batchv1.Job
	err error
}

// script answers reads in order; the last answer repeats.
type script struct {
	mu    sync.Mutex
	steps []step
	i     int
}

func (s *script) next() step {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.steps[min(s.i, len(s.steps)-1)]
	s.i++
	return st
}

// take returns the next step if it is an object (the watch delivers it as a change) and last if it is the
// script's last; false if it is an error or no object (the watch ends there and a list reads it).
func (s *script) take() (st step, last, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st = s.steps[min(s.i, len(s.steps)-1)]
	if st.err != nil || (st.pod == nil && st.job == nil) {
		return st, false, false
	}
	s.i++
	return st, s.i >= len(s.steps), true
}

// scriptWatch is a watch that delivers its script's objects as changes until the script reaches an error
// or a step without an object, where it ends (the watcher lists again and reads it); at the script's last
// step it stays open.
type scriptWatch struct {
	ch   chan watch.Event
	stop chan struct{}
	once sync.Once
}

func (w *scriptWatch) ResultChan() <-chan watch.Event { return w.ch }
func (w *scriptWatch) Stop()                          { w.once.Do(func() { close(w.stop) }) }

func newScriptWatch(s *script) *scriptWatch {
	w := &scriptWatch{ch: make(chan watch.Event), stop: make(chan struct{})}
	go func() {
		defer close(w.ch)
		for {
			st, last, ok := s.take()
			if !ok {
				return
			}
			var obj runtime.Object = st.job
			if st.pod != nil {
				obj = st.pod
			}
			select {
			case w.ch <- watch.Event{Type: watch.Modified, Object: obj}:
			case <-w.stop:
				return
			}
			if last {
				<-w.stop
				return
			}
		}
	}()
	return w
}

// scripted is a fake clientset whose Pod lists and watches and Job reads and watches follow pods and jobs:
// a list or a read takes the next step, a watch delivers the steps that follow as changes until an error
// or a step without an object ends it. Its log reads return an empty log (the stream-following code has
// its own tests).
func scripted(pods, jobs []step) *fake.Clientset {
	cs := fake.NewClientset()
	ps, js := &script{steps: pods}, &script{steps: jobs}
	cs.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		st := ps.next()
		if st.err != nil {
			return true, nil, st.err
		}
		l := &corev1.PodList{}
		if st.pod != nil {
			l.Items = []corev1.Pod{*st.pod}
		}
		return true, l, nil
	})
	cs.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
		return true, newScriptWatch(ps), nil
	})
	cs.PrependReactor("get", "jobs", func(k8stesting.Action) (bool, runtime.Object, error) {
		st := js.next()
		if st.err != nil {
			return true, nil, st.err
		}
		return true, st.job, nil
	})
	cs.PrependWatchReactor("jobs", func(k8stesting.Action) (bool, watch.Interface, error) {
		return true, newScriptWatch(js), nil
	})
	cs.PrependReactor("get", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "log" {
			return true, &runtime.Unknown{}, nil
		}
		return false, nil, nil
	})
	return cs
}

// fastRetry makes a cold call's watches retry within milliseconds.
var fastRetry = backoff{first: time.Millisecond, limit: 4 * time.Millisecond}

// repeat is n copies of st.
func repeat(n int, st step) []step {
	out := make([]step, n)
	for i := range out {
		out[i] = st
	}
	return out
}

func concat(parts ...[]step) []step {
	var out []step
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// TestFollowRidesOutAPIServerRestart: a cold run's state is read from the Pod and the Job; an API server
// that goes away meanwhile (refused connections, a draining 429, the 403s of a server that just started)
// is ridden out for OutageTolerance and the run ends as the Pod says once it answers again. An outage
// longer than the tolerance, or a refusal while the server is there, fails the call with ErrClusterDown on
// one line; the sandbox's own outcomes (input refused, credential failure, deadline) keep their sentinels.
func TestFollowRidesOutAPIServerRestart(t *testing.T) {
	running := []step{{job: jobRunning()}}
	tests := []struct {
		name      string
		pods      []step
		jobs      []step
		tolerance time.Duration
		wantErr   error
		wantMsg   string
		wantExit  int32
		wantDone  bool
	}{
		{name: "no outage",
			pods:     []step{{pod: podPending()}, {pod: podAgentRunning()}, {pod: podToolRunning()}, {pod: podFinished(0)}},
			jobs:     running,
			wantDone: true},
		{name: "the Pod does not exist yet while the API server is away",
			pods:     concat([]step{{}}, repeat(30, step{err: errRefused}), repeat(5, step{err: errStarting}), []step{{}, {pod: podAgentRunning()}, {pod: podFinished(0)}}),
			jobs:     concat(repeat(3, step{err: errRefused}), running),
			wantDone: true},
		{name: "a just-started server's 403 after it answered once",
			pods: concat([]step{{pod: podToolRunning()}}, repeat(10, step{err: errRefused}), []step{{pod: podToolRunning()}},
				repeat(5, step{err: errStarting}), []step{{pod: podFinished(0)}}),
			jobs:     running,
			wantDone: true},
		{name: "restart while the tool runs: refused, draining, starting, back",
			pods: concat([]step{{pod: podAgentRunning()}, {pod: podToolRunning()}}, repeat(10, step{err: errDraining}),
				repeat(30, step{err: errRefused}), repeat(10, step{err: errStarting}), []step{{pod: podFinished(0)}}),
			jobs:     running,
			wantDone: true},
		{name: "Job reads during the restart: refused, then draining",
			pods: concat(repeat(10, step{pod: podToolRunning()}), repeat(10, step{err: errRefused}),
				repeat(10, step{pod: podToolRunning()}), []step{{pod: podFinished(0)}}),
			jobs:     []step{{err: errRefused}, {err: errDraining}, {job: jobRunning()}},
			wantDone: true},
		{name: "the tool's own failure after an outage is its result",
			pods:     concat([]step{{pod: podToolRunning()}}, repeat(20, step{err: errRefused}), []step{{pod: podFinished(2)}}),
			jobs:     running,
			wantExit: 2, wantDone: true},
		{name: "an outage longer than the tolerance",
			pods:      concat([]step{{pod: podToolRunning()}}, []step{{err: errRefused}}),
			jobs:      []step{{err: errRefused}},
			tolerance: 50 * time.Millisecond,
			wantErr:   ErrClusterDown, wantMsg: "the API server did not answer for"},
		{name: "a refusal while the API server is there is final",
			pods:    []step{{err: errForbidden}},
			jobs:    running,
			wantErr: ErrClusterDown, wantMsg: "list the Pods of Job j"},
		{name: "a Job gone for good is final",
			pods:    []step{{pod: podToolRunning()}},
			jobs:    []step{{err: apierrors.NewNotFound(batchv1.Resource("jobs"), "j")}},
			wantErr: ErrClusterDown, wantMsg: "read Job j"},
		{name: "input refused after an outage",
			pods:    concat(repeat(20, step{err: errRefused}), []step{{pod: podCheckRefused()}}),
			jobs:    running,
			wantErr: ErrInputRefused, wantMsg: "null_resource"},
		{name: "credential agent failed",
			pods:    []step{{pod: podPending()}, {pod: podAgentFailed()}},
			jobs:    running,
			wantErr: ErrCredentials, wantMsg: "vault login failed: permission denied"},
		{name: "deadline seen on the Job once the API server is back",
			pods:    concat([]step{{pod: podToolRunning()}}, repeat(15, step{err: errRefused}), []step{{pod: podToolRunning()}}),
			jobs:    concat([]step{{err: errRefused}}, []step{{job: jobFailed("DeadlineExceeded")}}),
			wantErr: ErrDeadline},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewRunner(scripted(tt.pods, tt.jobs), "ns", 1)
			r.retry = fastRetry
			r.OutageTolerance = tt.tolerance
			if r.OutageTolerance == 0 {
				r.OutageTolerance = time.Minute
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			job := jobRunning()
			job.Spec.ActiveDeadlineSeconds = ptr.To(int64(60))
			res := &Result{ExitCode: -1}
			var stages []Stage
			err := r.follow(ctx, job, res, func(s Stage) { stages = append(stages, s) })
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("follow: %v", err)
				}
			} else {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("follow: %v, want %v", err, tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.wantMsg) || strings.Contains(err.Error(), "\n") {
					t.Errorf("error %q: want one line that says %q", err, tt.wantMsg)
				}
			}
			if res.ExitCode != tt.wantExit && tt.wantDone {
				t.Errorf("exit code %d, want %d", res.ExitCode, tt.wantExit)
			}
			if got := len(stages) > 0 && stages[len(stages)-1] == StageDone; got != tt.wantDone {
				t.Errorf("stages %v: done=%v, want %v", stages, got, tt.wantDone)
			}
		})
	}
}

// TestRunRidesOutAPIServerRestart: the whole cold run — create, follow, collect, delete — with the API
// server gone between the Job's creation and the Pod's end and again while the result is collected: the
// Job is found again, the credential agent's result is read once the server answers, and the Job is
// deleted.
func TestRunRidesOutAPIServerRestart(t *testing.T) {
	cs := scripted(concat([]step{{pod: podToolRunning()}}, repeat(20, step{err: errRefused}), []step{{pod: podFinished(0)}},
		repeat(2, step{err: errRefused}), []step{{pod: podFinished(0)}}),
		concat(repeat(2, step{err: errRefused}), []step{{job: jobRunning()}}))
	var logReads, deletes atomic.Int32
	cs.PrependReactor("get", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "log" {
			return false, nil, nil
		}
		opts := a.(k8stesting.GenericAction).GetValue().(*corev1.PodLogOptions)
		if opts.Follow {
			return true, nil, errRefused
		}
		if opts.Container == contract.CredentialAgentContainer && logReads.Add(1) <= 2 {
			return true, nil, errDraining
		}
		if opts.Container == contract.CredentialAgentContainer {
			return true, &runtime.Unknown{Raw: []byte(`{"event":"credential.issued","lease_id":"l1"}` + "\n" +
				`{"event":"credential.revoked","lease_id":"l1"}` + "\n" + `{"event":"tool.result","result":{"pods":[]}}` + "\n")}, nil
		}
		return true, &runtime.Unknown{Raw: []byte("tool log\n")}, nil
	})
	cs.PrependReactor("delete", "jobs", func(k8stesting.Action) (bool, runtime.Object, error) {
		deletes.Add(1)
		return true, nil, nil
	})
	r := NewRunner(cs, "ns", 1)
	r.retry = fastRetry
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	job := jobRunning()
	job.Spec.ActiveDeadlineSeconds = ptr.To(int64(60))
	res, err := r.Run(ctx, job, nil)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if string(res.Output) != `{"pods":[]}` || len(res.CredentialEvents) != 2 || string(res.ToolLog) != "tool log\n" {
		t.Errorf("result %q, events %v, tool log %q: want the agent's result, both credential events and the tool's log", res.Output, res.CredentialEvents, res.ToolLog)
	}
	if deletes.Load() == 0 {
		t.Error("the Job was not deleted")
	}
}

// TestRunCollectFailsClearly: a run whose result cannot be read because the API server stays away past the
// tolerance fails with ErrClusterDown on one line, and its Job is still deleted.
func TestRunCollectFailsClearly(t *testing.T) {
	cs := scripted(concat([]step{{pod: podFinished(0)}}, []step{{err: errRefused}}), []step{{job: jobRunning()}})
	var deletes atomic.Int32
	cs.PrependReactor("delete", "jobs", func(k8stesting.Action) (bool, runtime.Object, error) {
		deletes.Add(1)
		return true, nil, nil
	})
	r := NewRunner(cs, "ns", 1)
	r.retry = fastRetry
	r.OutageTolerance = 100 * time.Millisecond
	job := jobRunning()
	job.Spec.ActiveDeadlineSeconds = ptr.To(int64(60))
	_, err := r.Run(context.Background(), job, nil)
	if !errors.Is(err, ErrClusterDown) || !strings.Contains(err.Error(), "find the Pod of Job j") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("run: %v, want ErrClusterDown on one line naming the Job", err)
	}
	if deletes.Load() == 0 {
		t.Error("the Job was not deleted")
	}
}

// TestOutageRide: which errors are ridden out, and for how long.
func TestOutageRide(t *testing.T) {
	now := time.Unix(1000, 0)
	o := newOutage(time.Minute)
	o.now = func() time.Time { return now }
	steps := []struct {
		after time.Duration
		err   error
		want  bool
	}{
		{0, errForbidden, false}, // allowed before: a 403 with no outage is a refusal
		{0, apierrors.NewNotFound(corev1.Resource("pods"), "p"), false},
		{0, errRefused, true}, // the outage starts
		{10 * time.Second, errDraining, true},
		{10 * time.Second, errStarting, true}, // a just-started server's 403 during the outage
		{10 * time.Second, apierrors.NewServiceUnavailable("not ready"), true},
		{10 * time.Second, apierrors.NewInternalError(errors.New("etcd leader changed")), true},
		{10 * time.Second, errors.New("http2: server sent GOAWAY and closed the connection; LastStreamID=1"), true},
		{10 * time.Second, apierrors.NewBadRequest("invalid"), false},
		{21 * time.Second, errRefused, false}, // 61 s into the outage: past the limit
	}
	for i, s := range steps {
		now = now.Add(s.after)
		if got := o.ride(s.err); got != s.want {
			t.Errorf("step %d (%v after %s): ride=%v, want %v", i, s.err, s.after, got, s.want)
		}
	}
	o.ok()
	if o.lasted() != 0 || !o.ride(errRefused) {
		t.Error("a success did not end the outage")
	}
	o.ok()
	now = now.Add(5 * time.Second)
	if !o.ride(errStarting) {
		t.Error("a 403 5 s after the outage ended (a server still starting) was not ridden out")
	}
	o.ok()
	now = now.Add(startupGrace)
	if o.ride(errStarting) {
		t.Error("a 403 long after the outage ended was ridden out")
	}
}

// brokenLogServer serves Pod p's credential-agent log (follow=true) the way an API server that restarts
// does: answer i (from 0) is plan[i] — "cut" sends the first line and drops the connection mid-stream,
// "503" refuses, "full" sends every line and holds the stream open. The last entry repeats. Pod reads
// (followOnce asks after a clean end) say the Pod runs.
func brokenLogServer(t *testing.T, lines []string, plan ...string) (kubernetes.Interface, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/namespaces/ns/pods/p" {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(corev1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
				ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}})
			return
		}
		if r.URL.Path != "/api/v1/namespaces/ns/pods/p/log" || r.URL.Query().Get("follow") != "true" {
			http.Error(w, "unexpected request "+r.URL.String(), http.StatusNotFound)
			return
		}
		i := int(n.Add(1)) - 1
		switch plan[min(i, len(plan)-1)] {
		case "503":
			http.Error(w, "the server is shutting down", http.StatusServiceUnavailable)
		case "cut":
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprintln(w, lines[0])
			w.(http.Flusher).Flush()
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		case "full":
			w.Header().Set("Content-Type", "text/plain")
			for _, l := range lines {
				fmt.Fprintln(w, l)
			}
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}
	}))
	t.Cleanup(srv.Close)
	c, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return c, &n
}

var agentLines = []string{`{"event":"credential.issued","lease_id":"l1"}`, `{"event":"credential.revoked","lease_id":"l1"}`,
	`{"event":"tool.result","exit_code":0,"result":{"ok":true}}`}

// TestWatchResultReconnects: a cold run's stream of the credential agent's log that the API server cuts or
// refuses (it restarts) is opened again with a backoff until it carries the result.
func TestWatchResultReconnects(t *testing.T) {
	c, n := brokenLogServer(t, agentLines, "cut", "503", "cut", "full")
	r := &Runner{Client: c, Namespace: "ns"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := r.watchResult(ctx, "p", nil)
	select {
	case <-w.result:
	case <-time.After(10 * time.Second):
		t.Fatalf("no result after %d streams", n.Load())
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.reconnects != 3 || n.Load() != 4 || w.issued.IsZero() {
		t.Errorf("reconnects %d, streams %d, issued %v: want 3 reconnects, 4 streams and the credential seen", w.reconnects, n.Load(), w.issued)
	}
}

// TestFollowWarmRidesOutBrokenStreams: a warm call's only channel is the agent's log stream; one cut or
// refused while the API server restarts is opened again, and the result comes from the stream that
// completes. A stream that stays refused past the tolerance fails the call with ErrClusterDown on one line.
func TestFollowWarmRidesOutBrokenStreams(t *testing.T) {
	tests := []struct {
		name      string
		plan      []string
		tolerance time.Duration
		wantErr   error
	}{
		{name: "cut, refused four times, cut, then whole", plan: []string{"cut", "503", "503", "503", "503", "cut", "full"}},
		{name: "refused past the tolerance", plan: []string{"cut", "503"}, tolerance: 600 * time.Millisecond, wantErr: ErrClusterDown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := brokenLogServer(t, agentLines, tt.plan...)
			r := &Runner{Client: c, Namespace: "ns", OutageTolerance: tt.tolerance}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			res := &Result{ExitCode: -1}
			err := r.followWarm(ctx, "p", nil, res, func(Stage, string) {}, "j")
			if !errors.Is(err, tt.wantErr) || (err != nil && strings.Contains(err.Error(), "\n")) {
				t.Fatalf("followWarm: %v, want %v", err, tt.wantErr)
			}
			if tt.wantErr == nil && (string(res.Output) != `{"ok":true}` || len(res.CredentialEvents) != 2 || res.ExitCode != 0) {
				t.Errorf("result %q, events %v, exit %d", res.Output, res.CredentialEvents, res.ExitCode)
			}
		})
	}
}

// TestFollowWatches: the cold call's watches deliver the Pod's and the Job's changes as they happen (the
// fake clientset's tracker, not a script): the run ends at the Pod's end, at the Job's deletion, or when
// the call is cancelled, with what it measured so far.
func TestFollowWatches(t *testing.T) {
	tests := []struct {
		name    string
		then    func(ctx context.Context, cs *fake.Clientset, cancel context.CancelFunc)
		wantErr error
		wantMsg string
		stages  []Stage
	}{
		{name: "the Pod ends", then: func(ctx context.Context, cs *fake.Clientset, _ context.CancelFunc) {
			_, _ = cs.CoreV1().Pods("ns").UpdateStatus(ctx, withGate(podFinished(0)), metav1.UpdateOptions{})
		}, stages: []Stage{StageCredentials, StageRunning, StageDone}},
		{name: "the Job is deleted", then: func(ctx context.Context, cs *fake.Clientset, _ context.CancelFunc) {
			_ = cs.BatchV1().Jobs("ns").Delete(ctx, "j", metav1.DeleteOptions{})
		}, wantErr: ErrClusterDown, wantMsg: `read Job j: jobs.batch "j" not found`, stages: []Stage{StageCredentials, StageRunning}},
		{name: "the call is cancelled", then: func(_ context.Context, _ *fake.Clientset, cancel context.CancelFunc) { cancel() },
			wantErr: context.Canceled, stages: []Stage{StageCredentials, StageRunning}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			job := jobRunning()
			job.Spec.ActiveDeadlineSeconds = ptr.To(int64(60))
			cs := fake.NewClientset(job)
			cs.PrependReactor("get", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				return a.GetSubresource() == "log", &runtime.Unknown{}, nil
			})
			r := NewRunner(cs, "ns", 1)
			r.retry = fastRetry
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			res := &Result{ExitCode: -1}
			var mu sync.Mutex
			var stages []Stage
			running := make(chan struct{})
			done := make(chan error, 1)
			go func() {
				done <- r.follow(ctx, job, res, func(s Stage) {
					mu.Lock()
					defer mu.Unlock()
					if stages = append(stages, s); s == StageRunning {
						close(running)
					}
				})
			}()
			watching := func() bool {
				n := 0
				for _, a := range cs.Actions() {
					if a.GetVerb() == "watch" {
						n++
					}
				}
				return n >= 2
			}
			for !watching() {
				time.Sleep(time.Millisecond)
			}
			if _, err := cs.CoreV1().Pods("ns").Create(ctx, withGate(podPending()), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := cs.CoreV1().Pods("ns").UpdateStatus(ctx, withGate(podToolRunning()), metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			select {
			case <-running:
			case err := <-done:
				t.Fatalf("follow ended before the tool ran: %v", err)
			}
			tt.then(ctx, cs, cancel)
			err := <-done
			if !errors.Is(err, tt.wantErr) || (err != nil && !strings.Contains(err.Error(), tt.wantMsg)) {
				t.Fatalf("follow: %v, want %v saying %q", err, tt.wantErr, tt.wantMsg)
			}
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(stages, tt.stages) {
				t.Errorf("stages %v, want %v", stages, tt.stages)
			}
			if res.Timings.PodStart <= 0 {
				t.Errorf("pod start %s: the run's measurements were not kept", res.Timings.PodStart)
			}
		})
	}
}

// withGate gives p a credential agent with the postStart gate: the credential is there once the kubelet
// reports the agent started.
func withGate(p *corev1.Pod) *corev1.Pod {
	p.Spec.InitContainers = []corev1.Container{{Name: contract.CredentialAgentContainer,
		Lifecycle: &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"wait"}}}}}}
	return p
}
