package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/oneline"
	"github.com/agent-sandbox/agent-sandbox/internal/scrub"
)

// Stage is a step of a sandbox run, reported as progress to the caller.
type Stage string

// The stages, in order.
const (
	StageQueued      Stage = "queued"
	StageAdmitted    Stage = "admitted"
	StageCredentials Stage = "credentials ready"
	StageRunning     Stage = "running"
	StageDone        Stage = "done"
)

// Stages lists every stage in order (for progress totals).
var Stages = []Stage{StageQueued, StageAdmitted, StageCredentials, StageRunning, StageDone}

// Sentinel errors of a run, checked with errors.Is.
var (
	ErrDenied        = errors.New("admission denied the sandbox Job")
	ErrWebhookDown   = errors.New("the admission webhook is unreachable, so sandbox Jobs are refused (fail closed)")
	ErrClusterDown   = errors.New("cannot reach the cluster")
	ErrCredentials   = errors.New("the credential agent could not get a credential")
	ErrDeadline      = errors.New("the sandbox exceeded its deadline")
	ErrSandboxFailed = errors.New("the sandbox failed")
	// ErrInputRefused means the tool's check (an init container that runs before the credential agent)
	// refused its input: no credential was issued.
	ErrInputRefused = errors.New("the sandbox refused the tool's input before any credential was issued")
	// ErrQuotaConflict means the API server refused an object of the call, admitted otherwise, on a
	// ResourceQuota update conflict, and went on refusing it (RetryOnQuotaConflict): the cluster was busy
	// with other calls; nothing was wrong with this one.
	ErrQuotaConflict = errors.New("the API server refused the call's object on a ResourceQuota update conflict (many calls at once)")
	// ErrNotSent means the call ended before its Job or claim was sent to the cluster (cancelled while it
	// waited for a slot, its workspace not published, the API server not reachable at all): no webhook saw
	// it, so nothing it carried, its approvals included, was used.
	ErrNotSent = errors.New("the call's Job was never sent to the cluster")
	// ErrRefusedBeforeCheck means the API server refused the call's Job in the mutating phase of admission:
	// the Job mutating webhook (contract.WebhookMutateJobs) refused it or could not be called, as when the
	// webhook is down. The API server calls validating webhooks only after every mutating one, so the
	// webhook that records approval tokens never saw the Job: nothing it carried was used.
	ErrRefusedBeforeCheck = errors.New("the API server refused the call's Job before the approval check")
)

// ApprovalsUnused reports whether a run that failed with err used none of the approvals its Job carried:
// the Job was never sent (ErrNotSent), or was refused before the webhook that records approvals saw it
// (ErrRefusedBeforeCheck). The caller may give them back.
func ApprovalsUnused(err error) bool {
	return errors.Is(err, ErrNotSent) || errors.Is(err, ErrRefusedBeforeCheck)
}

// CreateError is the error of a run whose Job could not be created: the API server refused it, or never
// answered (the runner then deletes the Job should the API server have stored it after all). The webhook may
// have admitted the Job, and recorded its audit anchor, before the API server refused it; the call's
// tool.result names the Job (audit.FieldJobsCreateFailed), which settles that anchor.
type CreateError struct {
	Job string
	Err error
}

func (e *CreateError) Error() string { return e.Err.Error() }
func (e *CreateError) Unwrap() error { return e.Err }

// FailedCreate returns the Job whose create failed with err (CreateError), if it did.
func FailedCreate(err error) (job string, ok bool) {
	var ce *CreateError
	if errors.As(err, &ce) {
		return ce.Job, true
	}
	return "", false
}

// Result is what a finished run produced.
type Result struct {
	JobName string
	// Warm is set when a warm Pod served the call (its Job is JobName).
	Warm bool
	// ExitCode of the tool container (-1 if it never ran).
	ExitCode int32
	// Output is the tool's result, one JSON object, as the credential agent reported it on its own output
	// stream (the tool.result event): scrubbed, and never taken from the tool's own output. Nil when the
	// agent reported none (ResultError then says why).
	Output      []byte
	ResultError string
	// ToolLog is the tool container's log (scrubbed by the tool), for diagnostics only.
	ToolLog []byte
	// CredentialEvents are the credential agent's structured events (credential.issued, credential.revoked).
	CredentialEvents []map[string]any
	// Timings of each phase.
	Timings Timings
}

// Timings split a run into its phases.
type Timings struct {
	Admission   time.Duration // create call, through both webhooks
	PodStart    time.Duration // admitted until the sidecar container started
	Credentials time.Duration // sidecar started until it was ready (kubeconfig written)
	Run         time.Duration // tool container running until the Job finished
	Cleanup     time.Duration // log collection and deletion
	Total       time.Duration
}

// Runner creates sandbox Jobs, follows them to the end, collects their output and deletes them. It holds
// only a client for the sandbox namespace: the untrusted MCP server's identity.
type Runner struct {
	Client kubernetes.Interface
	// Streams carries the requests that last as long as a call — the credential agent's log follows and a
	// cold call's watches of its Job and Pod: a client without a whole-request timeout (Client when nil).
	Streams   kubernetes.Interface
	Namespace string
	// OutageTolerance is how long a call in flight rides out an API server that does not answer (restarting,
	// say) before it fails with ErrClusterDown; DefaultOutageTolerance when zero. Every request of a call in
	// flight is tried again meanwhile: the Job's and Pod's reads, the credential agent's log stream, the
	// collection of the result.
	OutageTolerance time.Duration
	sem             chan struct{}
	// retry is the backoff of the cold call's Pod and Job watches when a request fails or a watch ends
	// (coldRetry when zero; tests make it short).
	retry backoff
	// lateSweep is how often a Job whose create got no answer is looked for again (5 s when zero).
	lateSweep time.Duration
}

// NewRunner returns a Runner that runs at most maxConcurrent sandboxes at once.
func NewRunner(c kubernetes.Interface, namespace string, maxConcurrent int) *Runner {
	if maxConcurrent <= 0 {
		maxConcurrent = 4
	}
	return &Runner{Client: c, Namespace: namespace, sem: make(chan struct{}, maxConcurrent)}
}

type beforeCreateKey struct{}

// beforeCreate is a call's hook, run at most once however often the call tries (a warm claim, then cold).
type beforeCreate struct {
	once sync.Once
	fn   func(context.Context) error
	err  error
}

// WithBeforeCreate returns ctx carrying fn, which Run and RunCall call once the call holds its concurrency
// slot and before they create or claim anything: what the Job needs (its workspace ConfigMap) is published
// only by a call that is about to run, not by one that waits for a slot or is cancelled while waiting. fn
// runs at most once per ctx; an error from it ends the call before any Job exists.
func WithBeforeCreate(ctx context.Context, fn func(context.Context) error) context.Context {
	return context.WithValue(ctx, beforeCreateKey{}, &beforeCreate{fn: fn})
}

// RunBeforeCreate runs the hook of ctx (WithBeforeCreate), if any, once; a Runner calls it once it holds the
// call's slot, before it creates or claims anything.
func RunBeforeCreate(ctx context.Context) error {
	h, _ := ctx.Value(beforeCreateKey{}).(*beforeCreate)
	if h == nil {
		return nil
	}
	h.once.Do(func() { h.err = h.fn(ctx) })
	return h.err
}

// takeSlot waits for one of the Runner's slots (MaxConcurrency calls run at once), or for ctx to end, and
// then runs ctx's before-create hook (RunBeforeCreate); release gives the slot back. Every call, cold or
// warm, takes its slot here before it creates or claims anything.
func (r *Runner) takeSlot(ctx context.Context) (release func(), err error) {
	select {
	case r.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %w", ErrNotSent, ctx.Err())
	}
	release = func() { <-r.sem }
	if err := RunBeforeCreate(ctx); err != nil {
		release()
		return nil, fmt.Errorf("%w: %w", ErrNotSent, err)
	}
	return release, nil
}

// Run submits job and waits for it; progress is called at each stage. The Job is always deleted before Run
// returns, also when ctx is cancelled (the call was cancelled) or the run fails.
func (r *Runner) Run(ctx context.Context, job *batchv1.Job, progress func(Stage)) (*Result, error) {
	if progress == nil {
		progress = func(Stage) {}
	}
	progress(StageQueued)
	release, err := r.takeSlot(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	start := time.Now()
	res := &Result{JobName: job.Name, ExitCode: -1}
	created, err := r.createJob(ctx, job)
	res.Timings.Admission = time.Since(start)
	if err != nil {
		return nil, &CreateError{Job: job.Name, Err: err}
	}
	progress(StageAdmitted)
	defer func() {
		c := time.Now()
		r.delete(created.Name)
		res.Timings.Cleanup += time.Since(c)
		res.Timings.Total = time.Since(start)
	}()

	if err := r.follow(ctx, created, res, progress); err != nil {
		// Cancelled or failed: the Job is deleted now, and what its credential agent reports as it stops (the
		// credential it issued, its revocation) is collected for the audit, for a bounded time.
		res.CredentialEvents = r.StopAndCollect(created.Name)
		return res, err
	}
	c := time.Now()
	err = r.collect(ctx, created.Name, res)
	res.Timings.Cleanup = time.Since(c)
	if err != nil {
		return res, err
	}
	return res, nil
}

// collect reads the finished run's logs into res: the credential agent's (its events and the tool's result)
// and the tool's. An API server that is away meanwhile is waited for (OutageTolerance); a Pod that is gone
// leaves res without a result, which then says so.
func (r *Runner) collect(ctx context.Context, job string, res *Result) error {
	var pod *corev1.Pod
	err := r.retryAPI(ctx, func(ctx context.Context) (err error) {
		pod, err = r.pod(ctx, job)
		return err
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: find the Pod of Job %s: %s", ErrClusterDown, job, oneline.Fold(scrub.String(err.Error())))
	}
	var agent []byte
	var agentErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		agentErr = r.retryAPI(ctx, func(ctx context.Context) (err error) {
			agent, err = r.logs(ctx, pod.Name, contract.CredentialAgentContainer)
			return err
		})
	}()
	_ = r.retryAPI(ctx, func(ctx context.Context) (err error) {
		res.ToolLog, err = r.logs(ctx, pod.Name, contract.ToolContainer)
		return err
	})
	<-done
	res.CredentialEvents, res.Output, res.ResultError = parseEvents(agent)
	if agentErr != nil && transientAPIError(agentErr) {
		return fmt.Errorf("%w: read the result of Job %s: %s", ErrClusterDown, job, oneline.Fold(scrub.String(agentErr.Error())))
	}
	return nil
}

// unreachable is the error of a call whose request failed for good: ErrClusterDown with what it tried, for
// how long the API server had been away (lasted, if it was), and the last error, on one line.
func unreachable(what string, err error, lasted time.Duration) error {
	msg := oneline.Fold(scrub.String(err.Error()))
	if lasted > 0 {
		return fmt.Errorf("%w: %s: the API server did not answer for %s: %s", ErrClusterDown, what, lasted.Round(time.Second), msg)
	}
	return fmt.Errorf("%w: %s: %s", ErrClusterDown, what, msg)
}

func (r *Runner) pod(ctx context.Context, job string) (*corev1.Pod, error) {
	pods, err := r.Client.CoreV1().Pods(r.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + job})
	if err != nil {
		return nil, err
	}
	if len(pods.Items) == 0 {
		return nil, apierrors.NewNotFound(corev1.Resource("pods"), job)
	}
	return &pods.Items[0], nil
}

func (r *Runner) logs(ctx context.Context, pod, container string) ([]byte, error) {
	rc, err := r.Client.CoreV1().Pods(r.Namespace).GetLogs(pod, &corev1.PodLogOptions{Container: container}).Stream(ctx)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(io.LimitReader(rc, maxLogBytes))
}

// credentialCollectTimeout bounds how long a cancelled or failed call waits, after deleting its Job, for the
// credential agent to revoke its credential and report it (it has the Pod's grace period to do so).
const credentialCollectTimeout = 20 * time.Second

// StopAndCollect deletes a call's Job (its Pod gets SIGTERM, so the credential agent revokes its lease) and
// returns the credential agent's events (credential.issued, credential.revoked, ...) as its log holds them
// when the agent has exited, or after credentialCollectTimeout: a call that ends early still records the
// credential it had and its revocation. It uses its own context (the call's may have ended). No Pod, or an
// agent that never started, gives no events.
func (r *Runner) StopAndCollect(job string) []map[string]any {
	ctx, cancel := context.WithTimeout(context.Background(), credentialCollectTimeout)
	defer cancel()
	pod, err := r.pod(ctx, job)
	started := false
	if err == nil {
		for _, s := range pod.Status.InitContainerStatuses {
			if s.Name == contract.CredentialAgentContainer && (s.State.Running != nil || s.State.Terminated != nil) {
				started = true
			}
		}
	}
	r.delete(job)
	if !started {
		return nil
	}
	// Follow the agent's log to its end: the container exits after it revoked (or the timeout ends it).
	rc, err := r.agentLog(ctx, pod.Name)
	if err != nil {
		// A Pod already gone takes its log with it; a finished agent's log is still there.
		out, lerr := r.logs(ctx, pod.Name, contract.CredentialAgentContainer)
		if lerr != nil {
			return nil
		}
		events, _, _ := parseEvents(out)
		return events
	}
	defer rc.Close()
	out, _ := io.ReadAll(io.LimitReader(rc, maxLogBytes))
	events, _, _ := parseEvents(out)
	return events
}

// DeleteJob removes a sandbox Job of this namespace and its Pod (the Pod gets SIGTERM, so its credential
// agent revokes the Vault lease). A Job that is already gone is not an error.
func (r *Runner) DeleteJob(ctx context.Context, name string) error {
	err := r.Client.BatchV1().Jobs(r.Namespace).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// JobsOf finds the Jobs serving one call, from the cluster rather than from anyone's record of it: the cold
// Job named after the request, the Jobs labelled with the request's ID — a Job with approvals is named after
// its tokens (ApprovalJobName), not the request — and the warm Jobs whose Pod was claimed for it.
func (r *Runner) JobsOf(ctx context.Context, tool, requestID string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	add := func(name string) {
		if !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	name := JobName(tool, requestID)
	if _, err := r.Client.BatchV1().Jobs(r.Namespace).Get(ctx, name, metav1.GetOptions{}); err == nil {
		add(name)
	} else if !apierrors.IsNotFound(err) {
		return nil, err
	}
	if len(validation.IsValidLabelValue(requestID)) == 0 && len(validation.IsValidLabelValue(tool)) == 0 {
		sel := labels.Set{contract.LabelTool: tool, contract.LabelRequestID: requestID}.String()
		jobs, err := r.Client.BatchV1().Jobs(r.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return nil, err
		}
		for _, j := range jobs.Items {
			add(j.Name)
		}
	}
	pods, err := r.Client.CoreV1().Pods(r.Namespace).List(ctx, metav1.ListOptions{LabelSelector: contract.LabelWarm})
	if err != nil {
		return nil, err
	}
	for _, p := range pods.Items {
		raw := p.Annotations[contract.AnnotationClaim]
		if raw == "" {
			continue
		}
		if c, err := ParseClaim(raw); err == nil && c.RequestID == requestID && p.Labels[batchv1.JobNameLabel] != "" {
			add(p.Labels[batchv1.JobNameLabel])
		}
	}
	return out, nil
}

// delete removes the Job and its Pod, with a fresh context: it also runs after the call was cancelled.
// It tries for 30 seconds before the call returns, then goes on trying in the background for ten minutes,
// so that a call ending while the API server restarts leaves no Job behind. (Past that, or if the server
// exits first, the Job's ttlSecondsAfterFinished removes it.)
func (r *Runner) delete(name string) {
	try := func(limit time.Duration) bool {
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		defer cancel()
		for {
			if err := r.DeleteJob(ctx, name); err == nil {
				return true
			}
			select {
			case <-ctx.Done():
				return false
			case <-time.After(time.Second):
			}
		}
	}
	if !try(30 * time.Second) {
		go try(10 * time.Minute)
	}
}

// maxLogBytes bounds a container log the runner reads; the agent's holds the tool's result (at most 4 MiB
// of JSON, whose binary fields grow by a third in base64).
const maxLogBytes = 16 << 20

// parseEvents reads the credential agent's JSON event lines and ignores anything else. The tool.result
// event carries the tool's result: it is returned apart, as the JSON of its result object.
func parseEvents(out []byte) (events []map[string]any, result []byte, resultErr string) {
	resultErr = "the credential agent reported no result"
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	sc.Buffer(make([]byte, 64<<10), maxLogBytes)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var ev map[string]any
		if json.Unmarshal([]byte(line), &ev) != nil || ev["event"] == nil {
			continue
		}
		if ev["event"] == toolResultEvent {
			// The agent scrubbed the result (text by patterns and exact values, binary fields checked);
			// scrubbing it here by pattern again would corrupt a saved plan.
			if r, ok := ev["result"].(map[string]any); ok {
				if b, err := json.Marshal(r); err == nil {
					result, resultErr = b, ""
				}
			} else if why, ok := ev["error"].(string); ok {
				resultErr = scrub.String(why)
			}
			continue
		}
		events = append(events, scrub.Value(ev).(map[string]any))
	}
	return events, result, resultErr
}

// agentWatch is what following the credential agent's log has seen.
type agentWatch struct {
	// result is closed when the agent has reported the tool's result (never, if the stream fails).
	result chan struct{}
	// notify, when set, hears of the agent's credential.issued (once) and tool.result (evIssued, evResult).
	notify func(coldEventKind)
	mu     sync.Mutex
	issued time.Time
	// reconnects counts the streams that ended before the result (each is opened again).
	reconnects int
}

// watchResult follows the credential agent's log of pod as a stream until ctx ends: it notes when the agent
// reports the credential issued, and closes result when the agent has reported the tool's result, telling
// notify (if not nil) of both. A stream that fails or ends before the result (an API server restarting, a
// kubelet closing it) is opened again after a backoff (250 ms doubling to 4 s), from the log's start;
// meanwhile the Pod's status still ends the run.
func (r *Runner) watchResult(ctx context.Context, pod string, notify func(coldEventKind)) *agentWatch {
	w := &agentWatch{result: make(chan struct{}), notify: notify}
	go func() {
		b := &backoff{}
		for ctx.Err() == nil {
			if w.followOnce(ctx, r, pod) {
				close(w.result)
				w.tell(evResult)
				return
			}
			w.mu.Lock()
			w.reconnects++
			w.mu.Unlock()
			if b.wait(ctx) != nil {
				return
			}
		}
	}()
	return w
}

func (w *agentWatch) tell(k coldEventKind) {
	if w.notify != nil {
		w.notify(k)
	}
}

// followOnce reads one stream of the agent's log; true once it carried the tool's result.
func (w *agentWatch) followOnce(ctx context.Context, r *Runner, pod string) bool {
	rc, err := r.agentLog(ctx, pod)
	if err != nil {
		return false
	}
	defer rc.Close()
	sc := bufio.NewScanner(rc)
	sc.Buffer(make([]byte, 64<<10), maxLogBytes)
	for sc.Scan() {
		var ev struct {
			Event string `json:"event"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue
		}
		switch ev.Event {
		case credentialIssuedEvent:
			w.mu.Lock()
			first := w.issued.IsZero()
			if first {
				w.issued = time.Now()
			}
			w.mu.Unlock()
			if first {
				w.tell(evIssued)
			}
		case toolResultEvent:
			return true
		}
	}
	return false
}

// The credential agent's events that end the mint and the run (broker.EventIssued,
// broker.EventToolResult).
const (
	credentialIssuedEvent = "credential.issued"
	toolResultEvent       = "tool.result"
)

// quotaConflictRetries is how many times a create refused on a ResourceQuota update conflict is tried again.
const quotaConflictRetries = 3

// RetryOnQuotaConflict runs create, and runs it again, a few times, while the API server refuses it on a
// ResourceQuota update conflict. Its ResourceQuota admission, which runs after every webhook, updates the
// sandbox namespace's quota status for each object created there; under a burst of calls its own retries can
// all lose the race, and the create fails with a Conflict on the resourcequotas object although nothing was
// wrong with the object. Only a create that may simply be repeated goes through here.
func RetryOnQuotaConflict(ctx context.Context, create func() error) error {
	for attempt := 1; ; attempt++ {
		err := create()
		if err == nil || !QuotaConflict(err) || attempt > quotaConflictRetries {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(attempt) * 100 * time.Millisecond):
		}
	}
}

// QuotaConflict tells a create refused because the ResourceQuota admission lost a race to update the quota's
// status (a Conflict on the resourcequotas object) from one refused for anything about the object itself.
func QuotaConflict(err error) bool {
	var status apierrors.APIStatus
	if !apierrors.IsConflict(err) || !errors.As(err, &status) {
		return false
	}
	d := status.Status().Details
	return d != nil && d.Kind == "resourcequotas"
}

// createJob creates job, again after a ResourceQuota update conflict (RetryOnQuotaConflict) unless the Job
// carries approvals: the webhook consumed them when it admitted the refused create (an approval admits
// exactly one Job), so a second create would be refused as a replay, and the caller is told instead to ask
// for a new approval.
func (r *Runner) createJob(ctx context.Context, job *batchv1.Job) (created *batchv1.Job, err error) {
	create := func() (err error) {
		created, err = r.Client.BatchV1().Jobs(r.Namespace).Create(ctx, job, metav1.CreateOptions{})
		return err
	}
	if job.Annotations[contract.AnnotationApprovalToken] != "" {
		err = create()
		if QuotaConflict(err) {
			return nil, fmt.Errorf("%w; the webhook had admitted the Job and used its approval, so ask for a new approval: %s",
				ErrQuotaConflict, oneline.Fold(scrub.String(err.Error())))
		}
	} else {
		err = RetryOnQuotaConflict(ctx, create)
	}
	if err == nil {
		return created, nil
	}
	if createUnanswered(err) {
		// The request may have reached the API server, which may have stored the Job (or may still store
		// it) though its answer never came back: the call is ending, so the Job must not run on its own.
		r.removeUnanswered(job)
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("create sandbox Job %s: %w", job.Name, ctx.Err())
	}
	if neverSent(err) {
		return nil, fmt.Errorf("%w: %w", ErrNotSent, classifyCreate("create sandbox Job", err))
	}
	if refusedByMutation(err) {
		return nil, fmt.Errorf("%w: %w", ErrRefusedBeforeCheck, classifyCreate("create sandbox Job", err))
	}
	return nil, classifyCreate("create sandbox Job", err)
}

// refusedByMutation reports whether the API server refused a Job create in the mutating phase of admission:
// the Job mutating webhook denied it or could not be called. Only the Status message names the webhook, in
// the API server's fixed phrasings (k8s.io/apiserver/pkg/admission/plugin/webhook/errors, and
// apierrors.NewInternalError around the failed call); the message must start with one, so that a denial by
// another webhook that quotes this one's name is not taken for it.
func refusedByMutation(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	msg, name := status.Status().Message, strconv.Quote(contract.WebhookMutateJobs)
	return strings.HasPrefix(msg, "Internal error occurred: failed calling webhook "+name+":") ||
		strings.HasPrefix(msg, "admission webhook "+name+" denied the request")
}

// neverSent reports whether a request failed before it was sent: its connection could not be made.
func neverSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// createUnanswered reports whether a failed create may all the same have created the object: the API server
// did not refuse it (no status came back: the call was cancelled, the connection broke, the client timed out)
// or said it timed out while it may still be processing the request. A connection that was never made
// created nothing.
func createUnanswered(err error) bool {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err)
	}
	return !neverSent(err)
}

// lateCreateWindow is how long after an unanswered create the API server may still store the object: its
// own limit on a request (kube-apiserver's --request-timeout, a minute by default), with a margin.
const lateCreateWindow = 75 * time.Second

// removeUnanswered deletes job if a create that got no answer stored it (sweepLate). Only this call's Job is
// deleted (the request ID label says whose it is): a Job of another call with the same name (an approval's
// tokens name it) is left alone.
func (r *Runner) removeUnanswered(job *batchv1.Job) {
	r.sweepLate(func(ctx context.Context) {
		got, err := r.Client.BatchV1().Jobs(r.Namespace).Get(ctx, job.Name, metav1.GetOptions{})
		if err != nil || got.Labels[contract.LabelRequestID] != job.Labels[contract.LabelRequestID] {
			return
		}
		_ = r.Client.BatchV1().Jobs(r.Namespace).Delete(ctx, job.Name, metav1.DeleteOptions{
			Preconditions:     &metav1.Preconditions{UID: &got.UID},
			PropagationPolicy: ptr.To(metav1.DeletePropagationBackground),
		})
	})
}

// sweepLate runs sweep now, and again in the background every lateSweepEvery for lateCreateWindow: what a
// request that got no answer may have done is undone also when the API server does it late.
func (r *Runner) sweepLate(sweep func(ctx context.Context)) {
	run := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		sweep(ctx)
	}
	run()
	go func() {
		for end := time.Now().Add(lateCreateWindow); time.Now().Before(end); {
			time.Sleep(r.lateSweepEvery())
			run()
		}
	}()
}

// lateSweepEvery is how often removeUnanswered looks again for a late Job.
func (r *Runner) lateSweepEvery() time.Duration {
	if r.lateSweep > 0 {
		return r.lateSweep
	}
	return 5 * time.Second
}

// classifyCreate turns a failed create (or claim) into an error a person can act on; what names the request
// in an error of no known kind ("" when the caller names it).
func classifyCreate(what string, err error) error {
	msg := oneline.Fold(scrub.String(err.Error()))
	switch {
	case QuotaConflict(err):
		return fmt.Errorf("%w: %s", ErrQuotaConflict, msg)
	case apierrors.IsForbidden(err) && strings.Contains(msg, "admission webhook"):
		// Before the next case: a denial's reason may quote anything.
		return fmt.Errorf("%w: %s", ErrDenied, msg)
	case strings.Contains(msg, "failed calling webhook"):
		return fmt.Errorf("%w: %s", ErrWebhookDown, msg)
	case apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		return fmt.Errorf("%w: %s", ErrDenied, msg)
	case isConnectionError(err):
		return fmt.Errorf("%w: %s", ErrClusterDown, msg)
	}
	if what == "" {
		return errors.New(msg)
	}
	return fmt.Errorf("%s: %s", what, msg)
}

// isConnectionError reports whether err says the connection to the API server could not be made or broke:
// by its type where the network stack's error is still in the chain, by its text where only the text came
// through (an error another layer formatted).
func isConnectionError(err error) bool {
	if utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) || utilnet.IsHTTP2ConnectionLost(err) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	s := err.Error()
	for _, text := range []string{"connection refused", "connection reset by peer", "broken pipe", "no such host", "i/o timeout", "dial tcp", "EOF"} {
		if strings.Contains(s, text) {
			return true
		}
	}
	return false
}
