//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/agent-sandbox/agent-sandbox/internal/audit"
	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/service"
	"github.com/agent-sandbox/agent-sandbox/test/corpus"
	"github.com/agent-sandbox/agent-sandbox/test/harness"
)

// answerLost is a transport that sends every Job create to the API server and then, once the server has
// answered, drops the answer: the client sees what it sees when a connection breaks, or its call is
// cancelled, after the request went out. cancel, when set, is called then (the call was cancelled).
type answerLost struct {
	next   http.RoundTripper
	cancel context.CancelFunc
	lost   int
	// jobCreates counts the Job creates sent.
	jobCreates int
	// method and suffix are the requests whose answer is lost (POST .../jobs when empty).
	method, suffix string
}

func (a *answerLost) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/jobs") {
		a.jobCreates++
	}
	resp, err := a.next.RoundTrip(req)
	method, suffix := a.method, a.suffix
	if method == "" {
		method, suffix = http.MethodPost, "/jobs"
	}
	if err != nil || req.Method != method || !strings.HasSuffix(req.URL.Path, suffix) {
		return resp, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	a.lost++
	if a.cancel != nil {
		a.cancel()
		return nil, context.Canceled
	}
	return nil, errors.New("read tcp 127.0.0.1:50000->127.0.0.1:6443: read: connection reset by peer")
}

// callEnv is a real kube-apiserver with the policy's sandbox namespace, and a call of a read tool to run there.
type callEnv struct {
	api  *harness.APIServer
	p    *policy.Compiled
	ns   string
	tool *policy.Tool
	inv  *policy.Invocation
}

func startCallEnv(t *testing.T) *callEnv {
	t.Helper()
	e := &callEnv{api: harness.StartAPIServer(t)}
	var err error
	if e.p, err = policy.LoadFile("../../policy/policy.yaml"); err != nil {
		t.Fatal(err)
	}
	e.ns = e.p.Spec.Sandbox.Namespace
	if _, err := e.api.Clientset.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.tool, _ = e.p.Tool("k8s_get_pod_status")
	if e.inv, err = e.tool.Invoke(corpus.PodParams()); err != nil {
		t.Fatal(err)
	}
	return e
}

// clientLosing is an admin clientset whose requests go through lost.
func (e *callEnv) clientLosing(t *testing.T, lost *answerLost) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(e.api.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { lost.next = rt; return lost }
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// render is the call's Job as the MCP server renders it for request id (with approvals when tokens are set).
func (e *callEnv) render(t *testing.T, id string, tokens []string) *batchv1.Job {
	t.Helper()
	job, err := sandbox.RenderJob(e.p, sandbox.JobSpec{Invocation: e.inv, RequestID: id, ApprovalTokens: tokens, AuditHead: strings.Repeat("0", 64)})
	if err != nil {
		t.Fatal(err)
	}
	return job
}

// TestUnansweredCreateLeavesNoJob: a real kube-apiserver stores a call's Job, and its answer is lost (the
// connection breaks, or the call is cancelled, after the create went out). Before, Run returned the error
// and left the Job to run on its own — for an approved apply, the apply, although the caller was told its
// call was cancelled and its Job deleted; now the Job is gone when Run returns.
func TestUnansweredCreateLeavesNoJob(t *testing.T) {
	e := startCallEnv(t)
	for i, cancelled := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		lost := &answerLost{}
		if cancelled {
			lost.cancel = cancel
		}
		cs := e.clientLosing(t, lost)
		id := []string{"req-aaaaaaaaaaaa", "req-bbbbbbbbbbbb"}[i]
		job := e.render(t, id, nil)
		_, err := sandbox.NewRunner(cs, e.ns, 1).Run(ctx, job, nil)
		cancel()
		if err == nil || lost.lost != 1 {
			t.Fatalf("Run: %v after %d lost answers, want an error after one", err, lost.lost)
		}
		if errors.Is(err, context.Canceled) != cancelled {
			t.Errorf("Run: %v; cancelled %v, want %v", err, errors.Is(err, context.Canceled), cancelled)
		}
		t.Logf("the call's error: %v", err)
		if _, err := e.api.Clientset.BatchV1().Jobs(e.ns).Get(context.Background(), job.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the Job %s the API server stored for the unanswered create: %v, want it deleted", job.Name, err)
		}
	}
}

// TestRecoverFindsApprovalJobs: a server killed between creating a call's Job and recording it leaves a Job
// that only the cluster knows of, and the next server's Recover deletes it. A Job with approvals is named
// after its tokens, not the request: Recover used to look for the request's name only, so a killed server's
// approved apply ran on, and its call was closed as abandoned with no Job deleted.
func TestRecoverFindsApprovalJobs(t *testing.T) {
	e := startCallEnv(t)
	ctx := context.Background()
	log, err := audit.Open(filepath.Join(t.TempDir(), "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	create := func(id string, tokens []string) string {
		t.Helper()
		if err := log.Write(audit.Event{RequestID: id, Name: audit.EventToolRequest, Tool: e.tool.Name, Fields: map[string]any{service.FieldServer: "srv-dead"}}); err != nil {
			t.Fatal(err)
		}
		job := e.render(t, id, tokens)
		if _, err := e.api.Clientset.BatchV1().Jobs(e.ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return job.Name
	}
	approved := create("req-aaaaaaaaaaaa", []string{"eyJhbGciOiJFZERTQSJ9.eyJqdGkiOiJ4In0.c2ln"})
	cold := create("req-bbbbbbbbbbbb", nil)
	if approved != sandbox.ApprovalJobName(e.tool.Name, "eyJhbGciOiJFZERTQSJ9.eyJqdGkiOiJ4In0.c2ln") || approved == sandbox.JobName(e.tool.Name, "req-aaaaaaaaaaaa") {
		t.Fatalf("the Job with approvals is named %s, not after its tokens", approved)
	}

	s := &service.Service{Audit: log, Instance: "srv-next"}
	rec, err := s.Recover(ctx, sandbox.NewRunner(e.api.Clientset, e.ns, 1), func(string) bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	var deleted []string
	for _, r := range rec {
		deleted = append(deleted, r.Jobs...)
	}
	slices.Sort(deleted)
	want := []string{approved, cold}
	slices.Sort(want)
	if !slices.Equal(deleted, want) {
		t.Errorf("Recover deleted %v, want %v", deleted, want)
	}
	left, err := e.api.Clientset.BatchV1().Jobs(e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range left.Items {
		t.Errorf("Job %s of an abandoned call is still there", j.Name)
	}
}

// TestUnansweredClaimLeavesNoPod: a call's claim of a warm Pod lands on a real kube-apiserver, and its answer
// is lost. Before, the runner took the lost answer for a Pod it could not claim: it tried the next one and
// then ran the call as a cold Job, while the claimed Pod ran the call's tool on its own — the call ran twice.
// Now the call ends, the claimed Pod's Job is deleted, and no cold Job is created.
func TestUnansweredClaimLeavesNoPod(t *testing.T) {
	e := startCallEnv(t)
	ctx := context.Background()
	for i, cancelled := range []bool{false, true} {
		// A ready warm Pod of the tool and its Job, as the pool leaves them (no kubelet here: the status is
		// written as the kubelet writes it).
		warmJob := fmt.Sprintf("as-warm-%d", i)
		spec := corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			InitContainers: []corev1.Container{{Name: contract.CredentialAgentContainer, Image: "agent", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}},
			Containers:     []corev1.Container{{Name: contract.ToolContainer, Image: "tool"}}}
		if _, err := e.api.Clientset.BatchV1().Jobs(e.ns).Create(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: warmJob},
			Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: spec}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod, err := e.api.Clientset.CoreV1().Pods(e.ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: warmJob + "-pod",
			Labels: map[string]string{contract.LabelTool: e.tool.Name, contract.LabelWarm: "true", batchv1.JobNameLabel: warmJob}}, Spec: spec}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning,
			InitContainerStatuses: []corev1.ContainerStatus{{Name: contract.CredentialAgentContainer, Image: "agent", State: running}},
			ContainerStatuses:     []corev1.ContainerStatus{{Name: contract.ToolContainer, Image: "tool", State: running}}}
		if _, err := e.api.Clientset.CoreV1().Pods(e.ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}

		// Bounded: a runner that went cold after the lost answer waits here for a Job no controller runs.
		callCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
		lost := &answerLost{method: http.MethodPatch, suffix: "/pods/" + pod.Name}
		if cancelled {
			lost.cancel = cancel
		}
		cs := e.clientLosing(t, lost)
		id := fmt.Sprintf("req-%012d", i)
		job := e.render(t, id, nil)
		claim, err := sandbox.RenderClaim(e.inv, id, nil, strings.Repeat("0", 64))
		if err != nil {
			t.Fatal(err)
		}
		_, err = sandbox.NewRunner(cs, e.ns, 1).RunCall(callCtx, job, claim, nil)
		cancel()
		if err == nil || lost.lost != 1 {
			t.Fatalf("RunCall: %v after %d lost answers, want an error after one", err, lost.lost)
		}
		if errors.Is(err, context.Canceled) != cancelled {
			t.Errorf("RunCall: %v; cancelled %v, want %v", err, errors.Is(err, context.Canceled), cancelled)
		}
		t.Logf("the call's error: %v", err)
		got, err := e.api.Clientset.CoreV1().Pods(e.ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil || got.Annotations[contract.AnnotationClaim] != claim {
			t.Fatalf("the claim did not land on the API server (%v): the test proves nothing", err)
		}
		if _, err := e.api.Clientset.BatchV1().Jobs(e.ns).Get(ctx, warmJob, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the claimed warm Pod's Job %s: %v, want it deleted", warmJob, err)
		}
		if lost.jobCreates != 0 {
			t.Errorf("the call went on as a cold Job (%d creates): it ran twice", lost.jobCreates)
		}
	}
}
