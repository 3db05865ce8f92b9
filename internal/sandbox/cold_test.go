package sandbox

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
)

// coldWant is how a sequence of events must end.
type coldWant struct {
	// Err names the sentinel the run ends with ("" for none: it finished); Message is part of its text.
	Err     string  `json:"err,omitempty"`
	Message string  `json:"message,omitempty"`
	Stages  []Stage `json:"stages"`
	// ExitCode is the tool's; the timings are in milliseconds.
	ExitCode      int32 `json:"exitCode"`
	PodStartMs    int64 `json:"podStartMs"`
	CredentialsMs int64 `json:"credentialsMs"`
	RunMs         int64 `json:"runMs"`
	// FollowAgent is the Pod whose agent log the run follows ("" for none).
	FollowAgent string `json:"followAgent,omitempty"`
	// ReadPods is how often the run asks for a fresh read of the Pod.
	ReadPods int `json:"readPods,omitempty"`
}

var sentinels = map[string]error{"ErrClusterDown": ErrClusterDown, "ErrCredentials": ErrCredentials, "ErrDeadline": ErrDeadline,
	"ErrSandboxFailed": ErrSandboxFailed, "ErrInputRefused": ErrInputRefused}

// recordedEvent is a coldEvent as testdata/cold holds it: Ms after the Job's admission.
type recordedEvent struct {
	Ms    int64          `json:"ms"`
	Kind  coldEventKind  `json:"kind"`
	What  string         `json:"what,omitempty"`
	Pod   *corev1.Pod    `json:"pod,omitempty"`
	Job   *batchv1.Job   `json:"job,omitempty"`
	Error *recordedError `json:"error,omitempty"`
}

// recordedError is a failed read: an API status (Code set) or a transport error, kept as its message
// (transientAPIError tells those by their text as well).
type recordedError struct {
	Message string `json:"message"`
	Code    int32  `json:"code,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// WatchEnded: the API server closed a watch before its timeout (errWatchEnded).
	WatchEnded bool `json:"watchEnded,omitempty"`
}

func (e *recordedError) err() error {
	if e.WatchEnded {
		return errWatchEnded
	}
	if e.Code != 0 {
		return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: e.Code, Reason: metav1.StatusReason(e.Reason), Message: e.Message}}
	}
	return errors.New(e.Message)
}

// replay feeds events to a fresh state machine and checks where it ends.
func replay(t *testing.T, deadline int64, tolerance time.Duration, events []recordedEvent, want coldWant) {
	t.Helper()
	admitted := time.Unix(1_000_000, 0)
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "j"}, Spec: batchv1.JobSpec{ActiveDeadlineSeconds: ptr.To(deadline)}}
	s := newColdState(job, admitted, tolerance)
	var stages []Stage
	var follow []string
	reads := 0
	for i, re := range events {
		ev := coldEvent{At: admitted.Add(time.Duration(re.Ms) * time.Millisecond), Kind: re.Kind, Pod: re.Pod, Job: re.Job, What: re.What}
		if re.Error != nil {
			ev.Err = re.Error.err()
		}
		if s.over() {
			t.Logf("event %d (%s at %d ms) after the end", i, re.Kind, re.Ms)
		}
		var acts []coldAction
		s, acts = s.next(ev)
		for _, a := range acts {
			if a.Stage != "" {
				stages = append(stages, a.Stage)
			}
			if a.FollowAgent != "" {
				follow = append(follow, a.FollowAgent)
			}
			if a.ReadPod {
				reads++
			}
		}
	}
	if reads != want.ReadPods {
		t.Errorf("asked for %d fresh reads of the Pod, want %d", reads, want.ReadPods)
	}
	if !s.over() {
		t.Fatalf("the run has not ended after %d events (stages %v)", len(events), stages)
	}
	if want.Err == "" && s.err != nil {
		t.Errorf("ended with %v, want finished", s.err)
	}
	if want.Err != "" && (!errors.Is(s.err, sentinels[want.Err]) || !strings.Contains(s.err.Error(), want.Message) || strings.Contains(s.err.Error(), "\n")) {
		t.Errorf("ended with %v, want %s saying %q on one line", s.err, want.Err, want.Message)
	}
	if !slices.Equal(stages, want.Stages) {
		t.Errorf("stages %v, want %v", stages, want.Stages)
	}
	if wantFollow := []string{want.FollowAgent}; (want.FollowAgent == "" && len(follow) > 0) || (want.FollowAgent != "" && !slices.Equal(follow, wantFollow)) {
		t.Errorf("followed the agent's log of %v, want %q once", follow, want.FollowAgent)
	}
	var res Result
	s.fill(&res)
	got := coldWant{ExitCode: res.ExitCode, PodStartMs: res.Timings.PodStart.Milliseconds(), CredentialsMs: res.Timings.Credentials.Milliseconds(), RunMs: res.Timings.Run.Milliseconds()}
	if got.ExitCode != want.ExitCode || got.PodStartMs != want.PodStartMs || got.CredentialsMs != want.CredentialsMs || got.RunMs != want.RunMs {
		t.Errorf("exit %d, pod start %d ms, credentials %d ms, run %d ms; want %d, %d, %d, %d", got.ExitCode, got.PodStartMs, got.CredentialsMs, got.RunMs,
			want.ExitCode, want.PodStartMs, want.CredentialsMs, want.RunMs)
	}
}

// TestColdRecorded replays the status sequences recorded from cold calls on the local cluster
// (testdata/cold/*.json, written by TestRecordColdCalls and each given its expected end by hand).
func TestColdRecorded(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "cold", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no recordings: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".json"), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var rec struct {
				recordingHead
				Events []recordedEvent `json:"events"`
				Want   *coldWant       `json:"want"`
			}
			if err := json.Unmarshal(b, &rec); err != nil {
				t.Fatal(err)
			}
			if rec.Want == nil {
				t.Fatal("the recording has no want: say by hand how it must end")
			}
			replay(t, rec.DeadlineSeconds, 0, rec.Events, *rec.Want)
		})
	}
}

// recordingHead is what a recording says of itself.
type recordingHead struct {
	Source          string `json:"source"`
	DeadlineSeconds int64  `json:"deadlineSeconds"`
}

// Pods of a gated cold run (a tool whose credential agent has the postStart gate) as the kubelet reports
// them, and of an ungated one (the project's runners, which wait for the kubeconfig themselves).
func gatedPod(mod func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{InitContainers: []corev1.Container{
		{Name: contract.CredentialAgentContainer, Lifecycle: &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"wait"}}}}}}}}
	p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: contract.CredentialAgentContainer}}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: contract.ToolContainer}}
	if mod != nil {
		mod(p)
	}
	return p
}

func ungatedPod(mod func(*corev1.Pod)) *corev1.Pod {
	p := gatedPod(mod)
	p.Spec.InitContainers[0].Lifecycle = nil
	return p
}

func agentRunning(started bool) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.InitContainerStatuses[0].State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
		p.Status.InitContainerStatuses[0].Started = ptr.To(started)
	}
}

func agentExited(code int32, msg string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.InitContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Message: msg}}
	}
}

func toolRunning(p *corev1.Pod) {
	p.Status.ContainerStatuses[0].State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
}

func toolExited(code int32) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}
	}
}

// toolExitedAfter is a tool that exited with code after running for d by the kubelet's clock.
func toolExitedAfter(code int32, d time.Duration) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		started := time.Unix(2_000_000, 0)
		p.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code,
			StartedAt: metav1.NewTime(started), FinishedAt: metav1.NewTime(started.Add(d))}}
	}
}

func toolWaiting(reason string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "pull access denied\nfor x"}}
	}
}

func checkExited(code int32, msg string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.InitContainers = append([]corev1.Container{{Name: contract.CheckContainer}}, p.Spec.InitContainers...)
		p.Status.InitContainerStatuses = append([]corev1.ContainerStatus{{Name: contract.CheckContainer,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Message: msg}}}}, p.Status.InitContainerStatuses...)
	}
}

// all applies every modification in order.
func all(mods ...func(*corev1.Pod)) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		for _, m := range mods {
			m(p)
		}
	}
}

func jobWith(typ batchv1.JobConditionType, reason string) *batchv1.Job {
	return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "j"}, Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{
		{Type: batchv1.JobSuspended, Status: corev1.ConditionFalse},
		{Type: typ, Status: corev1.ConditionTrue, Reason: reason, Message: "the Job\nfailed"}}}}
}

func pod(ms int64, p *corev1.Pod) recordedEvent    { return recordedEvent{Ms: ms, Kind: evPod, Pod: p} }
func job(ms int64, j *batchv1.Job) recordedEvent   { return recordedEvent{Ms: ms, Kind: evJob, Job: j} }
func kind(ms int64, k coldEventKind) recordedEvent { return recordedEvent{Ms: ms, Kind: k} }
func failed(ms int64, what string, err *recordedError) recordedEvent {
	return recordedEvent{Ms: ms, Kind: evReadFailed, What: what, Error: err}
}

var (
	refused    = &recordedError{Message: `Get "https://10.0.0.1:6443/api/v1/namespaces/agent-sandbox/pods?labelSelector=job-name%3Dj": dial tcp 10.0.0.1:6443: connect: connection refused`}
	watchEnded = &recordedError{Message: "watch closed", WatchEnded: true}
	forbidden  = &recordedError{Code: 403, Reason: string(metav1.StatusReasonForbidden), Message: `pods is forbidden: User "mcp" cannot list resource "pods"`}
	notFound   = &recordedError{Code: 404, Reason: string(metav1.StatusReasonNotFound), Message: `jobs.batch "j" not found`}
	draining   = &recordedError{Code: 429, Reason: string(metav1.StatusReasonTooManyRequests), Message: "the apiserver is shutting down"}
)

const podsOf, jobOf = "list the Pods of Job j", "read Job j"

var allStages = []Stage{StageCredentials, StageRunning, StageDone}

// TestColdNext: each transition of the cold call's state machine, over event sequences built by hand (the
// recorded ones are in TestColdRecorded): the stages reported, how the run ends, the tool's exit code and
// the phases' timings, which are the events' own times.
func TestColdNext(t *testing.T) {
	tests := []struct {
		name      string
		events    []recordedEvent
		tolerance time.Duration
		want      coldWant
	}{
		{name: "gated: the agent starts, its postStart returns, the tool runs and exits, the agent exits",
			events: []recordedEvent{pod(100, gatedPod(nil)), pod(2000, gatedPod(agentRunning(false))), pod(3000, gatedPod(agentRunning(true))),
				pod(3500, gatedPod(all(agentRunning(true), toolRunning))), pod(5000, gatedPod(all(agentRunning(true), toolExited(0)))),
				pod(5600, gatedPod(all(agentExited(0, ""), toolExited(0))))},
			want: coldWant{Stages: allStages, PodStartMs: 2000, CredentialsMs: 1500, RunMs: 2100, FollowAgent: "p"}},
		{name: "gated: the agent's tool.result ends the run before the kubelet reports the agent's exit",
			events: []recordedEvent{pod(2000, gatedPod(agentRunning(true))), pod(2400, gatedPod(all(agentRunning(true), toolRunning))),
				kind(2500, evIssued), pod(4000, gatedPod(all(agentRunning(true), toolExited(0)))), kind(4100, evResult)},
			want: coldWant{Stages: allStages, PodStartMs: 2000, CredentialsMs: 400, RunMs: 1700, FollowAgent: "p"}},
		{name: "a result before the tool's exit waits for it",
			events: []recordedEvent{pod(2000, gatedPod(all(agentRunning(true), toolRunning))), kind(3000, evResult),
				pod(3300, gatedPod(all(agentRunning(true), toolExited(0))))},
			want: coldWant{Stages: allStages, PodStartMs: 2000, RunMs: 1300, FollowAgent: "p"}},
		{name: "ungated: the tool container starts first and the credential is there at credential.issued",
			events: []recordedEvent{pod(1000, ungatedPod(all(agentRunning(true), toolRunning))), kind(1800, evIssued),
				pod(3000, ungatedPod(all(agentRunning(true), toolExited(0)))), kind(3100, evResult)},
			want: coldWant{Stages: allStages, PodStartMs: 1000, CredentialsMs: 800, RunMs: 1300, FollowAgent: "p"}},
		{name: "ungated: Started alone is no credential",
			events: []recordedEvent{pod(1000, ungatedPod(all(agentRunning(true), toolRunning))), pod(1500, ungatedPod(all(agentRunning(true), toolRunning))),
				kind(2000, evIssued), pod(2500, ungatedPod(all(agentExited(0, ""), toolExited(0))))},
			want: coldWant{Stages: allStages, PodStartMs: 1000, CredentialsMs: 1000, RunMs: 500, FollowAgent: "p"}},
		{name: "ungated: a stream that never reported the credential leaves the tool container's start",
			events: []recordedEvent{pod(1000, ungatedPod(all(agentRunning(true), toolRunning))), pod(4000, ungatedPod(all(agentExited(0, ""), toolExited(3))))},
			want:   coldWant{Stages: allStages, ExitCode: 3, PodStartMs: 1000, RunMs: 3000, FollowAgent: "p"}},
		{name: "a Pod first seen over: no agent start, no credential timing",
			events: []recordedEvent{pod(0, nil), pod(9000, gatedPod(all(agentExited(0, ""), toolExited(0))))},
			want:   coldWant{Stages: allStages}},
		{name: "a tool first seen ended: its run is the kubelet's start to finish",
			events: []recordedEvent{pod(2000, gatedPod(agentRunning(true))), pod(4000, gatedPod(all(agentExited(0, ""), toolExitedAfter(0, 1500*time.Millisecond))))},
			want:   coldWant{Stages: allStages, PodStartMs: 2000, CredentialsMs: 500, RunMs: 1500, FollowAgent: "p"}},
		{name: "the tool's check refuses its input",
			events: []recordedEvent{pod(500, gatedPod(checkExited(3, "resource \"null_resource\" is not allowed\n")))},
			want:   coldWant{Err: "ErrInputRefused", Message: `resource "null_resource" is not allowed`, ExitCode: -1}},
		{name: "the agent fails before the tool ran: its last line",
			events: []recordedEvent{pod(2000, gatedPod(agentRunning(false))), pod(2500, gatedPod(agentExited(1, "starting\nvault login failed: permission denied\n")))},
			want:   coldWant{Err: "ErrCredentials", Message: "the agent said: vault login failed: permission denied", ExitCode: -1, PodStartMs: 2000, FollowAgent: "p"}},
		{name: "an agent that fails after the tool ended does not fail the call",
			events: []recordedEvent{pod(2000, gatedPod(all(agentRunning(true), toolRunning))), pod(3000, gatedPod(all(agentExited(1, "revoke failed"), toolExited(0))))},
			want:   coldWant{Stages: allStages, PodStartMs: 2000, RunMs: 1000, FollowAgent: "p"}},
		{name: "an image that cannot be pulled",
			events: []recordedEvent{pod(2000, gatedPod(all(agentRunning(true), toolWaiting("ContainerCreating")))), pod(2500, gatedPod(all(agentRunning(true), toolWaiting("ErrImagePull"))))},
			want: coldWant{Err: "ErrSandboxFailed", Message: "container " + contract.ToolContainer + ": ErrImagePull: pull access denied for x", ExitCode: -1, PodStartMs: 2000,
				Stages: []Stage{StageCredentials}, FollowAgent: "p"}},
		{name: "the deadline, seen on the Job",
			events: []recordedEvent{job(10, jobWith("", "")), pod(2000, gatedPod(all(agentRunning(true), toolRunning))), job(62000, jobWith(batchv1.JobFailed, "DeadlineExceeded")),
				pod(62010, gatedPod(all(agentRunning(true), toolRunning)))},
			want: coldWant{Err: "ErrDeadline", Message: "(60s)", Stages: []Stage{StageCredentials, StageRunning}, ExitCode: -1, PodStartMs: 2000, RunMs: 60010,
				FollowAgent: "p", ReadPods: 1}},
		{name: "the Job fails without the tool's failure: evicted, say",
			events: []recordedEvent{pod(2000, gatedPod(all(agentRunning(true), toolRunning))), pod(3000, nil), job(4000, jobWith(batchv1.JobFailed, "PodFailurePolicy")), pod(4010, nil)},
			want: coldWant{Err: "ErrSandboxFailed", Message: "PodFailurePolicy: the Job failed", Stages: []Stage{StageCredentials, StageRunning}, ExitCode: -1,
				PodStartMs: 2000, RunMs: 2010, FollowAgent: "p", ReadPods: 1}},
		{name: "the Job fails because the tool did: its result",
			events: []recordedEvent{pod(2000, gatedPod(all(agentRunning(true), toolExited(2)))), job(3000, jobWith(batchv1.JobFailed, "BackoffLimitExceeded")),
				pod(3010, gatedPod(all(agentRunning(true), toolExited(2))))},
			want: coldWant{Stages: allStages, ExitCode: 2, PodStartMs: 2000, RunMs: 1010, FollowAgent: "p", ReadPods: 1}},
		{name: "a finished Job waits for a Pod read newer than it: the tool's exit seen there is its result",
			events: []recordedEvent{pod(2000, gatedPod(all(agentRunning(true), toolRunning))), job(3000, jobWith(batchv1.JobFailed, "BackoffLimitExceeded")),
				job(3005, jobWith(batchv1.JobFailed, "BackoffLimitExceeded")), pod(3010, gatedPod(all(agentRunning(true), toolExited(2))))},
			want: coldWant{Stages: allStages, ExitCode: 2, PodStartMs: 2000, RunMs: 1010, FollowAgent: "p", ReadPods: 1}},
		{name: "the Job fails although the tool exited 0: a sandbox failure",
			events: []recordedEvent{pod(2000, gatedPod(all(agentRunning(true), toolExited(0)))), job(3000, jobWith(batchv1.JobFailed, "BackoffLimitExceeded")),
				pod(3010, gatedPod(all(agentRunning(true), toolExited(0))))},
			want: coldWant{Err: "ErrSandboxFailed", Message: "BackoffLimitExceeded: the Job failed", Stages: []Stage{StageCredentials, StageRunning},
				PodStartMs: 2000, RunMs: 1010, FollowAgent: "p", ReadPods: 1}},
		{name: "the Job completes before the Pod was seen to end",
			events: []recordedEvent{pod(2000, gatedPod(all(agentRunning(true), toolRunning))), job(3000, jobWith(batchv1.JobComplete, "")),
				pod(3010, gatedPod(all(agentRunning(true), toolRunning)))},
			want: coldWant{Stages: allStages, ExitCode: -1, PodStartMs: 2000, RunMs: 1010, FollowAgent: "p", ReadPods: 1}},
		{name: "an outage while the tool runs is ridden out, and a 403 just after it",
			events: []recordedEvent{pod(2000, gatedPod(all(agentRunning(true), toolRunning))), failed(3000, podsOf, refused), failed(3100, jobOf, draining),
				failed(89000, podsOf, refused), pod(90000, gatedPod(all(agentRunning(true), toolRunning))), failed(91000, jobOf, forbidden),
				pod(92000, gatedPod(all(agentExited(0, ""), toolExited(0))))},
			want: coldWant{Stages: allStages, PodStartMs: 2000, RunMs: 90000, FollowAgent: "p"}},
		{name: "a watch the restarting server closed, then its 403 before its caches are filled: ridden out",
			events: []recordedEvent{pod(2000, gatedPod(all(agentRunning(true), toolRunning))), failed(3000, jobOf, watchEnded),
				failed(3200, jobOf, forbidden), pod(4000, gatedPod(all(agentExited(0, ""), toolExited(0))))},
			want: coldWant{Stages: allStages, PodStartMs: 2000, RunMs: 2000, FollowAgent: "p"}},
		{name: "an outage longer than the tolerance",
			events:    []recordedEvent{pod(2000, gatedPod(agentRunning(true))), failed(3000, podsOf, refused), failed(100000, jobOf, refused), failed(138001, podsOf, refused)},
			tolerance: DefaultOutageTolerance,
			want: coldWant{Err: "ErrClusterDown", Message: "list the Pods of Job j: the API server did not answer for 2m15s: Get ", ExitCode: -1, PodStartMs: 2000,
				Stages: []Stage{StageCredentials}, FollowAgent: "p"}},
		{name: "a refusal while the API server is there",
			events: []recordedEvent{pod(2000, gatedPod(nil)), failed(2100, podsOf, forbidden)},
			want:   coldWant{Err: "ErrClusterDown", Message: `list the Pods of Job j: pods is forbidden: User "mcp" cannot list resource "pods"`, ExitCode: -1}},
		{name: "a 403 long after an outage is a refusal",
			events: []recordedEvent{pod(2000, gatedPod(nil)), failed(3000, podsOf, refused), pod(4000, gatedPod(nil)), failed(35000, podsOf, forbidden)},
			want:   coldWant{Err: "ErrClusterDown", Message: "list the Pods of Job j: pods is forbidden", ExitCode: -1}},
		{name: "the Job deleted under the call",
			events: []recordedEvent{pod(2000, gatedPod(all(agentRunning(true), toolRunning))), failed(2500, jobOf, notFound), pod(2600, nil)},
			want: coldWant{Err: "ErrClusterDown", Message: `read Job j: jobs.batch "j" not found`, Stages: []Stage{StageCredentials, StageRunning}, ExitCode: -1,
				PodStartMs: 2000, FollowAgent: "p"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			replay(t, 60, tt.tolerance, tt.events, tt.want)
		})
	}
}
