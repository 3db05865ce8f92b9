package sandbox

import (
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/oneline"
	"github.com/agent-sandbox/agent-sandbox/internal/scrub"
)

// A cold call is followed as a state machine: coldState is what the runner knows of the call's Job, and
// next turns one coldEvent (the Pod or the Job as a watch reports it, a request that failed, what the
// credential agent's log said) into the next state and the actions the runner takes (report a stage,
// follow the agent's log). next does no I/O and reads no clock: every time it records is an event's, so a
// recorded sequence of events replays to the same stages, outcome and timings (cold_test.go).

// coldEventKind tells what a coldEvent reports.
type coldEventKind string

// The events of a cold call.
const (
	// evPod: the Job's Pod as it stands now (Pod nil: it has none, yet or any more).
	evPod coldEventKind = "pod"
	// evJob: the Job as it stands now.
	evJob coldEventKind = "job"
	// evReadFailed: a read of the Pod or the Job (What) failed with Err; a Job that is gone is one too.
	evReadFailed coldEventKind = "readFailed"
	// evIssued: the credential agent's log reported credential.issued.
	evIssued coldEventKind = "issued"
	// evResult: the credential agent's log reported tool.result.
	evResult coldEventKind = "result"
)

// coldEvent is one thing the runner learnt about a cold call, and when.
type coldEvent struct {
	At   time.Time
	Kind coldEventKind
	Pod  *corev1.Pod
	Job  *batchv1.Job
	What string
	Err  error
}

// coldAction is what next asks the runner to do: report Stage, follow the credential agent's log of the
// Pod FollowAgent, or read the Pod afresh (ReadPod) and report it.
type coldAction struct {
	Stage       Stage
	FollowAgent string
	ReadPod     bool
}

// coldPhase is how far a cold call has got. Phases only advance, and may be skipped (a Pod first seen with
// its tool already ended goes from phaseWaiting to phaseOver).
type coldPhase int

const (
	// phaseWaiting: admitted; the credential agent has not been seen running.
	phaseWaiting coldPhase = iota
	// phaseAgentUp: the credential agent runs and its log is followed.
	phaseAgentUp
	// phaseCredentialed: the credential is there (StageCredentials reported).
	phaseCredentialed
	// phaseRunning: the tool runs with its credential (StageRunning reported).
	phaseRunning
	// phaseOver: the run ended, as err says (nil: finished; StageDone reported).
	phaseOver
)

// coldState is what the runner knows of one cold call. The zero times are "not yet".
type coldState struct {
	job      string
	deadline int64 // the Job's activeDeadlineSeconds, for the deadline's error
	admitted time.Time
	phase    coldPhase
	err      error
	// pod is the Job's Pod as last reported (nil: none); the agent's log events are judged against it.
	pod *corev1.Pod
	// ended is a Job that has finished (complete or failed) and waits for a Pod read newer than it: the
	// Pod decides first (the tool's exit code, the agent's result), then the Job, as when both were read.
	ended *batchv1.Job
	// issued and result: what the credential agent's log has reported.
	issued, result bool
	// agentUp is when the credential agent was first seen running; credential when its credential was
	// first known to be there; toolSeen when the tool container was first seen running or ended; running
	// when the tool began to run with its credential (the later of the two).
	agentUp, credential, toolSeen, running time.Time
	exitCode                               int32
	// timings holds PodStart, Credentials and Run.
	timings Timings
	// down is the API server's absence, one for the Pod's and the Job's reads: it is either there or not.
	down outage
}

// newColdState is the state of a call whose Job was admitted at admitted; an API server away for longer
// than tolerance (DefaultOutageTolerance when zero) fails it.
func newColdState(job *batchv1.Job, admitted time.Time, tolerance time.Duration) coldState {
	return coldState{job: job.Name, deadline: ptr.Deref(job.Spec.ActiveDeadlineSeconds, 0), admitted: admitted,
		exitCode: -1, down: *newOutage(tolerance)}
}

// over reports whether the run has ended; err is how.
func (s coldState) over() bool { return s.phase == phaseOver }

// fill copies what the run measured into res: the tool's exit code and the phases' timings.
func (s coldState) fill(res *Result) {
	res.ExitCode = s.exitCode
	res.Timings.PodStart, res.Timings.Credentials, res.Timings.Run = s.timings.PodStart, s.timings.Credentials, s.timings.Run
}

// next is the state after ev, and what the runner is to do.
func (s coldState) next(ev coldEvent) (coldState, []coldAction) {
	if s.over() {
		return s, nil
	}
	var acts []coldAction
	switch ev.Kind {
	case evReadFailed:
		// An API server that restarts is gone for seconds; the sandbox runs on meanwhile.
		if !s.down.rideAt(ev.At, ev.Err) {
			s.end(unreachable(ev.What, ev.Err, s.down.lastedAt(ev.At)))
		}
		return s, nil
	case evPod:
		s.down.ok()
		s.pod = ev.Pod
	case evJob:
		s.down.ok()
		if !finished(ev.Job) {
			return s, nil
		}
		first := s.ended == nil
		s.ended = ev.Job
		if !first {
			return s, nil
		}
		return s, []coldAction{{ReadPod: true}}
	case evIssued:
		s.issued = true
	case evResult:
		s.result = true
	}
	if s.pod != nil {
		acts = s.onPod(ev.At, s.pod)
	}
	if ev.Kind == evPod && s.ended != nil && !s.over() {
		acts = append(acts, s.onJob(ev.At, s.ended)...)
	}
	return s, acts
}

// end ends the run with err (nil: it finished).
func (s *coldState) end(err error) { s.phase, s.err = phaseOver, err }

// advance moves to phase p, if that is further, and returns the stage it reports.
func (s *coldState) advance(p coldPhase, acts []coldAction, st Stage) []coldAction {
	if p <= s.phase {
		return acts
	}
	s.phase = p
	if st == "" {
		return acts
	}
	return append(acts, coldAction{Stage: st})
}

// onPod reads the Pod's containers: the tool's check, the credential agent, the tool.
func (s *coldState) onPod(at time.Time, pod *corev1.Pod) []coldAction {
	acts, stop := s.onInitContainers(at, pod)
	if stop {
		return acts
	}
	toolDone := false
	for _, c := range pod.Status.ContainerStatuses {
		if c.Name != contract.ToolContainer {
			continue
		}
		if (c.State.Running != nil || c.State.Terminated != nil) && s.toolSeen.IsZero() {
			s.toolSeen = at
			// First seen ended (it ran between two reads of the Pod): the kubelet's start and finish, both on
			// the node's clock, say how long it ran; without them its run would measure nothing.
			if term := c.State.Terminated; term != nil && !term.StartedAt.IsZero() && term.FinishedAt.After(term.StartedAt.Time) {
				s.toolSeen = at.Add(-term.FinishedAt.Sub(term.StartedAt.Time))
			}
		}
		if c.State.Terminated != nil {
			s.exitCode = c.State.Terminated.ExitCode
			toolDone = true
		}
	}
	// The tool runs once its container does and its credential is there (in this order with the gate;
	// without it the container usually starts first and waits). A stream that never reported the
	// credential leaves the container's start.
	if !s.toolSeen.IsZero() && s.running.IsZero() && (!s.credential.IsZero() || toolDone) {
		s.running = s.toolSeen
		if s.credential.After(s.running) {
			s.running = s.credential
		}
		if !s.agentUp.IsZero() {
			// From the sidecar's start to the tool's run: Vault login, the credential, the kubeconfig
			// written, the tool container started (with the gate: after all that).
			s.timings.Credentials = s.running.Sub(s.agentUp)
		}
		if s.credential.IsZero() {
			s.credential = s.running
			acts = s.advance(phaseCredentialed, acts, StageCredentials)
		}
		acts = s.advance(phaseRunning, acts, StageRunning)
	}
	// The tool has exited and the credential agent has revoked and reported (or exited): the run is over.
	// The Pod's phase and the Job's condition follow a few seconds later; nothing here waits for them.
	if toolDone && (agentEnded(pod) || s.result) {
		s.timings.Run = at.Sub(s.running)
		acts = append(acts, coldAction{Stage: StageDone})
		s.end(nil)
		return acts
	}
	if err := stuck(pod); err != nil {
		s.end(err)
	}
	return acts
}

// onInitContainers reads the tool's check and the credential agent; stop is set when the run ended.
func (s *coldState) onInitContainers(at time.Time, pod *corev1.Pod) (acts []coldAction, stop bool) {
	for _, c := range pod.Status.InitContainerStatuses {
		if c.Name == contract.CheckContainer {
			if term := failedTermination(c); term != nil {
				s.end(fmt.Errorf("%w: %s", ErrInputRefused, oneline.Fold(scrub.String(term.Message))))
				return acts, true
			}
			continue
		}
		if c.Name != contract.CredentialAgentContainer {
			continue
		}
		if c.State.Running != nil && s.agentUp.IsZero() {
			s.agentUp = at
			s.timings.PodStart = at.Sub(s.admitted)
			acts = append(s.advance(phaseAgentUp, acts, ""), coldAction{FollowAgent: pod.Name})
		}
		// The credential is there: with the postStart gate, when the kubelet reports the sidecar started
		// (the hook returned once the kubeconfig existed); without it (the project's runners, which wait for
		// the file themselves), when the agent reports credential.issued.
		ready := s.issued
		if gated(pod) {
			ready = c.Started != nil && *c.Started && !s.agentUp.IsZero()
		}
		if ready && s.credential.IsZero() {
			s.credential = at
			acts = s.advance(phaseCredentialed, acts, StageCredentials)
		}
		// An agent that fails before the tool has ended fails the call: before its credential (the tool,
		// held back by the gate or waiting for the file itself, cannot run without one) or during the run.
		if term := failedTermination(c); term != nil && !toolTerminated(pod) {
			s.end(fmt.Errorf("%w; the agent said: %s", ErrCredentials, lastLine(scrub.String(term.Message))))
			return acts, true
		}
	}
	return acts, false
}

// onJob reads the conditions of a Job that has finished, once the Pod was read after it. The Job itself only
// matters when it fails (deadline, pod failure) or completes before its Pod was seen to end.
func (s *coldState) onJob(at time.Time, job *batchv1.Job) []coldAction {
	for _, c := range job.Status.Conditions {
		if c.Status != corev1.ConditionTrue || (c.Type != batchv1.JobComplete && c.Type != batchv1.JobFailed) {
			continue
		}
		if !s.running.IsZero() {
			s.timings.Run = at.Sub(s.running)
		}
		switch {
		case c.Type == batchv1.JobFailed && c.Reason == "DeadlineExceeded":
			s.end(fmt.Errorf("%w (%ds)", ErrDeadline, s.deadline))
			return nil
		case c.Type == batchv1.JobFailed && s.exitCode <= 0:
			s.end(fmt.Errorf("%w: %s: %s", ErrSandboxFailed, c.Reason, oneline.Fold(c.Message)))
			return nil
		}
		// Complete, or failed because the tool did: its own error result is in its output.
		s.end(nil)
		return []coldAction{{Stage: StageDone}}
	}
	return nil
}

// finished reports whether the Job has completed or failed.
func finished(job *batchv1.Job) bool {
	for _, c := range job.Status.Conditions {
		if c.Status == corev1.ConditionTrue && (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) {
			return true
		}
	}
	return false
}

// agentEnded reports whether the Pod's credential agent has exited.
func agentEnded(pod *corev1.Pod) bool {
	for _, c := range pod.Status.InitContainerStatuses {
		if c.Name == contract.CredentialAgentContainer && c.State.Terminated != nil {
			return true
		}
	}
	return false
}

// gated reports whether the Pod's credential agent has the postStart gate that holds the tool container back
// until the kubeconfig exists (webhook.WaitsForCredential: every tool but the project's own runners).
func gated(pod *corev1.Pod) bool {
	for _, c := range pod.Spec.InitContainers {
		if c.Name == contract.CredentialAgentContainer {
			return c.Lifecycle != nil && c.Lifecycle.PostStart != nil
		}
	}
	return false
}

// toolTerminated reports whether the Pod's tool container has ended.
func toolTerminated(pod *corev1.Pod) bool {
	for _, s := range pod.Status.ContainerStatuses {
		if s.Name == contract.ToolContainer && s.State.Terminated != nil {
			return true
		}
	}
	return false
}

// failedTermination returns the termination record of a container that exited with an error.
func failedTermination(s corev1.ContainerStatus) *corev1.ContainerStateTerminated {
	if t := s.State.Terminated; t != nil && t.ExitCode != 0 {
		return t
	}
	if t := s.LastTerminationState.Terminated; t != nil && t.ExitCode != 0 {
		return t
	}
	return nil
}

// stuck reports a Pod that cannot start for a reason that will not fix itself.
func stuck(pod *corev1.Pod) error {
	for _, list := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, s := range list {
			if w := s.State.Waiting; w != nil {
				switch w.Reason {
				case "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError", "CreateContainerError":
					return fmt.Errorf("%w: container %s: %s: %s", ErrSandboxFailed, s.Name, w.Reason, oneline.Fold(w.Message))
				}
			}
		}
	}
	return nil
}

// lastLine is the last non-empty line of a termination message: the kubelet fills it with the tail of the
// container's log, and the credential agent's reason is its last line.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return oneline.Fold(lines[len(lines)-1])
}
