//go:build integration

package integration

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/test/harness"
)

// TestColdRunAgainstAPIServer: a cold call's runner (sandbox.Runner.Run) against a real kube-apiserver and
// the real job controller, with the test playing the kubelet: the Job's Pod, made by the job controller,
// goes through the statuses a kubelet gives it. Each run watches its Job and Pod from the API server's own
// resource versions and field and label selectors, and ends as the Pod or the Job says: done with the
// tool's exit code and every stage; the deadline the job controller enforces; a Job deleted under the call;
// the call cancelled (its Job deleted).
func TestColdRunAgainstAPIServer(t *testing.T) {
	api := harness.StartAPIServer(t, harness.WithControllerManager("job"))
	cs := api.Clientset
	ctx := context.Background()
	const ns = "cold"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		deadline int64
		// kubelet plays the Pod's life after the tool started (job is the Job's name); cancel ends the call.
		kubelet func(t *testing.T, job, pod string, cancel context.CancelFunc)
		wantErr error
		wantMsg string
		stages  []sandbox.Stage
		exit    int32
	}{
		{name: "the tool exits 3 and the agent after it", deadline: 60, kubelet: func(t *testing.T, _, pod string, _ context.CancelFunc) {
			setStatus(t, cs, ns, pod, true, ptr.To(int32(3)))
			setStatus(t, cs, ns, pod, false, ptr.To(int32(3)))
		}, stages: []sandbox.Stage{sandbox.StageQueued, sandbox.StageAdmitted, sandbox.StageCredentials, sandbox.StageRunning, sandbox.StageDone}, exit: 3},
		{name: "the deadline", deadline: 3, kubelet: func(*testing.T, string, string, context.CancelFunc) {},
			wantErr: sandbox.ErrDeadline, wantMsg: "(3s)", stages: []sandbox.Stage{sandbox.StageQueued, sandbox.StageAdmitted, sandbox.StageCredentials, sandbox.StageRunning}, exit: -1},
		{name: "the Job deleted under the call", deadline: 60, kubelet: func(t *testing.T, job, _ string, _ context.CancelFunc) {
			// In the background, as a person or the chaos cleanup deletes one: the Job goes at once (with the
			// orphan default it would wait for the garbage collector, which this test does not run).
			bg := metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}
			if err := cs.BatchV1().Jobs(ns).Delete(context.Background(), job, bg); err != nil {
				t.Error(err)
			}
		}, wantErr: sandbox.ErrClusterDown, wantMsg: "not found", stages: []sandbox.Stage{sandbox.StageQueued, sandbox.StageAdmitted, sandbox.StageCredentials, sandbox.StageRunning}, exit: -1},
		{name: "the call cancelled", deadline: 60, kubelet: func(_ *testing.T, _, _ string, cancel context.CancelFunc) { cancel() },
			wantErr: context.Canceled, stages: []sandbox.Stage{sandbox.StageQueued, sandbox.StageAdmitted, sandbox.StageCredentials, sandbox.StageRunning}, exit: -1},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := sandbox.NewRunner(cs, ns, 1)
			name := "cold-" + string(rune('a'+i))
			cctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			var mu sync.Mutex
			var stages []sandbox.Stage
			running := make(chan struct{})
			type outcome struct {
				res *sandbox.Result
				err error
			}
			done := make(chan outcome, 1)
			go func() {
				res, err := r.Run(cctx, coldJob(name, tt.deadline), func(s sandbox.Stage) {
					mu.Lock()
					defer mu.Unlock()
					if stages = append(stages, s); s == sandbox.StageRunning {
						close(running)
					}
				})
				done <- outcome{res, err}
			}()
			pod := waitPod(t, cs, ns, name)
			setStatus(t, cs, ns, pod, true, nil)
			select {
			case <-running:
			case o := <-done:
				t.Fatalf("the run ended before the tool ran: %v", o.err)
			case <-time.After(30 * time.Second):
				t.Fatal("the run did not report the tool running")
			}
			tt.kubelet(t, name, pod, cancel)
			o := <-done
			if !errors.Is(o.err, tt.wantErr) || (o.err != nil && !strings.Contains(o.err.Error(), tt.wantMsg)) {
				t.Fatalf("run: %v, want %v saying %q", o.err, tt.wantErr, tt.wantMsg)
			}
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(stages, tt.stages) {
				t.Errorf("stages %v, want %v", stages, tt.stages)
			}
			if o.res.ExitCode != tt.exit || o.res.Timings.PodStart <= 0 || o.res.Timings.Total <= 0 {
				t.Errorf("exit %d, timings %+v: want exit %d and the pod start and total measured", o.res.ExitCode, o.res.Timings, tt.exit)
			}
			if _, err := cs.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("the Job is still there after the run: %v", err)
			}
		})
	}
}

// coldJob is a cold sandbox Job as far as the runner reads it: the credential agent as a native sidecar
// with the postStart gate, the tool, a deadline, one Pod.
func coldJob(name string, deadline int64) *batchv1.Job {
	return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: batchv1.JobSpec{
		ActiveDeadlineSeconds: ptr.To(deadline), BackoffLimit: ptr.To(int32(0)),
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			InitContainers: []corev1.Container{{Name: contract.CredentialAgentContainer, Image: "agent", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
				Lifecycle: &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/agent-sandbox", "wait"}}}}}},
			Containers: []corev1.Container{{Name: contract.ToolContainer, Image: "tool"}}}}}}
}

// waitPod waits for the job controller to make the Job's Pod and returns its name.
func waitPod(t *testing.T, cs kubernetes.Interface, ns, job string) string {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		pods, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "job-name=" + job})
		if err == nil && len(pods.Items) > 0 {
			return pods.Items[0].Name
		}
	}
	t.Fatalf("the job controller made no Pod for Job %s", job)
	return ""
}

// setStatus writes the Pod's status as a kubelet would: the agent running (started) or exited 0, the tool
// running (code nil) or exited with code.
func setStatus(t *testing.T, cs kubernetes.Interface, ns, pod string, agentRunning bool, code *int32) {
	t.Helper()
	ctx := context.Background()
	p, err := cs.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	agent := corev1.ContainerStatus{Name: contract.CredentialAgentContainer, Image: "agent", Started: ptr.To(agentRunning),
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now}}}
	if agentRunning {
		agent.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}
	}
	tool := corev1.ContainerStatus{Name: contract.ToolContainer, Image: "tool", Started: ptr.To(code == nil),
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}
	if code != nil {
		tool.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: *code, Reason: "Error", StartedAt: now, FinishedAt: now}}
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.InitContainerStatuses = []corev1.ContainerStatus{agent}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{tool}
	if _, err := cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}
