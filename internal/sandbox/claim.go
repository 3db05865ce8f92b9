package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/oneline"
	"github.com/agent-sandbox/agent-sandbox/internal/scrub"
)

// errNoWarmPod means no warm Pod could be claimed; the call runs as a cold Job instead.
var errNoWarmPod = errors.New("no warm Pod could be claimed")

// RunCall runs one call: on a warm Pod of the Job's tool when claim is set and one can be claimed, as the
// cold Job otherwise. progress receives each stage and the name of the Job that serves the call.
func (r *Runner) RunCall(ctx context.Context, job *batchv1.Job, claim string, progress func(Stage, string)) (*Result, error) {
	if progress == nil {
		progress = func(Stage, string) {}
	}
	if claim != "" {
		res, err := r.runWarm(ctx, job.Labels[contract.LabelTool], claim, job.Spec.ActiveDeadlineSeconds, progress)
		if !errors.Is(err, errNoWarmPod) {
			return res, err
		}
	}
	return r.Run(ctx, job, func(st Stage) { progress(st, job.Name) })
}

// claimCandidates is how many warm Pods a call tries before it goes cold (others may claim them first).
const claimCandidates = 3

// runWarm claims a ready warm Pod of tool with claim and follows the call to its result on the credential
// agent's log stream, which carries the result the moment the agent has revoked the credential: no
// polling, and no waiting for the kubelet to notice that the tool exited. The warm Job is always deleted.
func (r *Runner) runWarm(ctx context.Context, tool, claim string, deadlineSeconds *int64, progress func(Stage, string)) (*Result, error) {
	progress(StageQueued, "")
	release, err := r.takeSlot(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	start := time.Now()
	limit := 2 * time.Minute
	if deadlineSeconds != nil {
		limit = time.Duration(*deadlineSeconds)*time.Second + time.Minute
	}
	fctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	pod, stream, err := r.claim(fctx, tool, claim)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	jobName := pod.Labels[batchv1.JobNameLabel]
	res := &Result{JobName: jobName, ExitCode: -1, Warm: true}
	res.Timings.Admission = time.Since(start)
	progress(StageAdmitted, jobName)
	defer func() {
		c := time.Now()
		r.delete(jobName)
		res.Timings.Cleanup += time.Since(c)
		res.Timings.Total = time.Since(start)
	}()

	if err := r.followWarm(fctx, pod.Name, stream, res, progress, jobName); err != nil {
		if len(res.CredentialEvents) == 0 {
			// Cancelled or failed: collect the credential agent's events as it stops (see StopAndCollect).
			res.CredentialEvents = r.StopAndCollect(jobName)
		}
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		if errors.Is(fctx.Err(), context.DeadlineExceeded) {
			return res, fmt.Errorf("%w (warm Pod %s)", ErrDeadline, pod.Name)
		}
		return res, err
	}
	c := time.Now()
	res.ToolLog, _ = r.logs(ctx, pod.Name, contract.ToolContainer)
	res.Timings.Cleanup = time.Since(c)
	return res, nil
}

// claim patches the claim onto one ready, unclaimed warm Pod of tool. A Pod someone else claimed first
// (a conflict) or that the webhook refuses (it finished, say) is skipped; after claimCandidates the call
// goes cold, where the webhook checks the same things again and explains a refusal.
//
// The credential agent's log stream of a candidate is opened before its claim and returned with the
// claimed Pod (nil if it could not be opened: followWarm opens one then). The kubelet follows a log file
// with inotify, but installs the watch only once it has read to the end; a line written in between waits
// for its one-second forced re-read. A stream opened on an agent that says nothing until its claim is
// already waiting, so the agent's first lines reach the server at once.
func (r *Runner) claim(ctx context.Context, tool, claim string) (*corev1.Pod, io.ReadCloser, error) {
	sel := labels.Set{contract.LabelTool: tool, contract.LabelWarm: "true"}.String()
	pods, err := r.Client.CoreV1().Pods(r.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, nil, errNoWarmPod
	}
	var ready []*corev1.Pod
	for i := range pods.Items {
		if p := &pods.Items[i]; Claimable(p) {
			ready = append(ready, p)
		}
	}
	preferSettled(ready, time.Now())
	for i, p := range ready {
		if i == claimCandidates {
			break
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"resourceVersion": p.ResourceVersion,
			"annotations":     map[string]string{contract.AnnotationClaim: claim},
		}})
		if err != nil {
			return nil, nil, err
		}
		stream, serr := r.agentLog(ctx, p.Name)
		if serr != nil {
			stream = nil
		}
		claimed, err := r.Client.CoreV1().Pods(r.Namespace).Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		if err == nil {
			return claimed, stream, nil
		}
		if stream != nil {
			stream.Close()
		}
		if createUnanswered(err) {
			// The claim may have landed (or may still land) though its answer was lost: that Pod would run the
			// call's tool on its own, and another candidate or the cold Job would run it again. The call ends,
			// and a Pod that carries its claim goes with its Job.
			r.removeUnansweredClaim(p, claim)
			if ctx.Err() != nil {
				return nil, nil, ctx.Err()
			}
			return nil, nil, classifyCreate("claim warm Pod "+p.Name, err)
		}
		switch {
		case ctx.Err() != nil:
			return nil, nil, ctx.Err()
		case apierrors.IsConflict(err), apierrors.IsNotFound(err), apierrors.IsForbidden(err), apierrors.IsInvalid(err):
			continue
		case neverSent(err) && i == 0:
			// No claim of this call reached the API server (an earlier candidate's did when i > 0).
			return nil, nil, fmt.Errorf("%w: %w", ErrNotSent, classifyCreate("claim warm Pod "+p.Name, err))
		case isConnectionError(err) || strings.Contains(err.Error(), "failed calling webhook"):
			return nil, nil, classifyCreate("claim warm Pod "+p.Name, err)
		}
	}
	return nil, nil, errNoWarmPod
}

// removeUnansweredClaim deletes the warm Job of pod if the claim patch that got no answer landed on it.
func (r *Runner) removeUnansweredClaim(pod *corev1.Pod, claim string) {
	job := pod.Labels[batchv1.JobNameLabel]
	r.sweepLate(func(ctx context.Context) {
		got, err := r.Client.CoreV1().Pods(r.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err == nil && got.UID == pod.UID && got.Annotations[contract.AnnotationClaim] == claim && job != "" {
			_ = r.DeleteJob(ctx, job)
		}
	})
}

// agentLog opens the credential agent's log of a warm Pod as a stream, from its start.
func (r *Runner) agentLog(ctx context.Context, pod string) (io.ReadCloser, error) {
	streams := r.Streams
	if streams == nil {
		streams = r.Client
	}
	return streams.CoreV1().Pods(r.Namespace).GetLogs(pod, &corev1.PodLogOptions{Container: contract.CredentialAgentContainer, Follow: true}).Stream(ctx)
}

// settleTime is how long a warm Pod's tool container has run before a claim reaches it at once. On a Pod
// that has only just started, the kubelet is still busy with it, and the claim's downward-API file appears
// about a second late (docs/design/measurements.md, "claim settle time").
const settleTime = 2 * time.Second

// preferSettled shuffles the candidates (concurrent calls spread over the pool instead of racing for one
// Pod) and then moves the settled ones — running for settleTime by the node's clock — before the fresh
// ones. A clock skew between this host and the node only loses the preference, never a Pod.
func preferSettled(pods []*corev1.Pod, now time.Time) {
	rand.Shuffle(len(pods), func(i, j int) { pods[i], pods[j] = pods[j], pods[i] })
	settled := func(p *corev1.Pod) bool {
		for _, s := range p.Status.ContainerStatuses {
			if s.Name == contract.ToolContainer && s.State.Running != nil {
				return now.Sub(s.State.Running.StartedAt.Time) >= settleTime
			}
		}
		return false
	}
	slices.SortStableFunc(pods, func(a, b *corev1.Pod) int {
		sa, sb := settled(a), settled(b)
		switch {
		case sa == sb:
			return 0
		case sa:
			return -1
		default:
			return 1
		}
	})
}

// Claimable is a warm Pod that is running, with its tool and agent started, not claimed and not going away.
func Claimable(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || p.Annotations[contract.AnnotationClaim] != "" {
		return false
	}
	running := func(list []corev1.ContainerStatus, name string) bool {
		for _, s := range list {
			if s.Name == name {
				return s.State.Running != nil
			}
		}
		return false
	}
	return running(p.Status.ContainerStatuses, contract.ToolContainer) && running(p.Status.InitContainerStatuses, contract.CredentialAgentContainer)
}

// streamBroken means the log stream ended or failed before the result; it is opened again. cause is why
// (a transient error when the API server is away); opened tells a stream that was read from one that could
// not be opened at all.
type streamBroken struct {
	cause  error
	opened bool
}

func (e *streamBroken) Error() string { return "the log stream broke: " + e.cause.Error() }
func (e *streamBroken) Unwrap() error { return e.cause }

// errStreamEnded is the cause of a stream that ended cleanly while its Pod still runs.
var errStreamEnded = errors.New("the stream ended while the Pod runs")

// followWarm reads the claimed Pod's credential-agent log as a stream until the tool.result event, starting
// with first when it is not nil. A stream that breaks before it (an API server restarting, a kubelet
// hiccup) is opened again, from the start of the log, after a backoff (250 ms doubling to 4 s), for as long
// as the runner's OutageTolerance counted from the first break that was not followed by a working stream.
func (r *Runner) followWarm(ctx context.Context, pod string, first io.ReadCloser, res *Result, progress func(Stage, string), job string) error {
	claimed := time.Now()
	down, b := newOutage(r.OutageTolerance), &backoff{}
	for {
		err := r.followOnce(ctx, pod, first, res, progress, job, claimed)
		first = nil
		var broken *streamBroken
		if !errors.As(err, &broken) {
			return err
		}
		if broken.opened {
			// The stream worked for a while: a new break starts a new outage.
			down.ok()
			b.reset()
		}
		if !down.ride(broken.cause) {
			return unreachable("follow warm Pod "+pod, broken.cause, down.lasted())
		}
		if werr := b.wait(ctx); werr != nil {
			return werr
		}
	}
}

func (r *Runner) followOnce(ctx context.Context, pod string, rc io.ReadCloser, res *Result, progress func(Stage, string), job string, claimed time.Time) error {
	if rc == nil {
		var err error
		if rc, err = r.agentLog(ctx, pod); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return &streamBroken{cause: err}
		}
	}
	defer rc.Close()
	var issued time.Time
	var log strings.Builder
	sc := bufio.NewScanner(rc)
	sc.Buffer(make([]byte, 64<<10), maxLogBytes)
	for sc.Scan() {
		line := sc.Text()
		if log.Len()+len(line) > maxLogBytes {
			return fmt.Errorf("%w: the credential agent's log exceeds %d bytes", ErrSandboxFailed, maxLogBytes)
		}
		log.WriteString(line)
		log.WriteByte('\n')
		var ev struct {
			Event    string `json:"event"`
			Error    string `json:"error"`
			ExitCode *int32 `json:"exit_code"`
		}
		if !strings.HasPrefix(strings.TrimSpace(line), "{") || json.Unmarshal([]byte(line), &ev) != nil {
			continue
		}
		switch ev.Event {
		case "credential.issued":
			issued = time.Now()
			res.Timings.Credentials = issued.Sub(claimed)
			progress(StageCredentials, job)
			progress(StageRunning, job)
		case "credential.failed":
			res.CredentialEvents, _, _ = parseEvents([]byte(log.String()))
			return fmt.Errorf("%w; the agent said: %s", ErrCredentials, oneline.Fold(scrub.String(ev.Error)))
		case toolResultEvent:
			if !issued.IsZero() {
				res.Timings.Run = time.Since(issued)
			}
			res.CredentialEvents, res.Output, res.ResultError = parseEvents([]byte(log.String()))
			if ev.ExitCode != nil {
				res.ExitCode = *ev.ExitCode
			}
			progress(StageDone, job)
			return nil
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err := sc.Err(); err != nil {
		return &streamBroken{cause: err, opened: true}
	}
	// The stream ended cleanly: the container exited without a result, or the kubelet or an API server that
	// shuts down closed it. Only the Pod tells which; one that cannot be read now is asked again.
	p, err := r.Client.CoreV1().Pods(r.Namespace).Get(ctx, pod, metav1.GetOptions{})
	switch {
	case err == nil && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning:
		return &streamBroken{cause: errStreamEnded, opened: true}
	case err != nil && ctx.Err() == nil && transientAPIError(err):
		return &streamBroken{cause: err, opened: true}
	}
	return fmt.Errorf("%w: the warm Pod's credential agent stopped before reporting a result", ErrSandboxFailed)
}
