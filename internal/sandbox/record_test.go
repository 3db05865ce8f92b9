//go:build record

package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
)

// TestRecordColdCalls records, from a live cluster, the events a cold call's runner feeds its state
// machine, for the replay tests (cold_test.go, testdata/cold). It watches the sandbox namespace for
// RECORD_FOR (a Go duration) and follows every cold Job created meanwhile with the runner's own watches and
// log follow (keep, podView, jobView, watchResult) and its state machine, as Runner.follow does, writing
// each event into RECORD_DIR/<job>.json. It reads only: the calls themselves come from whatever runs
// meanwhile (make e2e, make chaos). Run it with
//
//	RECORD_KUBECONFIG=... RECORD_NAMESPACE=agent-sandbox RECORD_DIR=/tmp/rec RECORD_FOR=5m \
//	  go test -tags record -run TestRecordColdCalls -timeout 30m ./internal/sandbox/
func TestRecordColdCalls(t *testing.T) {
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("RECORD_KUBECONFIG"))
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ns, dir := os.Getenv("RECORD_NAMESPACE"), os.Getenv("RECORD_DIR")
	d, err := time.ParseDuration(os.Getenv("RECORD_FOR"))
	if err != nil || ns == "" || dir == "" {
		t.Fatalf("set RECORD_KUBECONFIG, RECORD_NAMESPACE, RECORD_DIR and RECORD_FOR: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	r := &Runner{Client: cs, Namespace: ns}
	var wg sync.WaitGroup
	seen := map[string]bool{}
	for ctx.Err() == nil {
		w, err := cs.BatchV1().Jobs(ns).Watch(ctx, metav1.ListOptions{})
		if err != nil {
			time.Sleep(time.Second)
			continue
		}
		for e := range w.ResultChan() {
			j, ok := e.Object.(*batchv1.Job)
			if !ok || e.Type != watch.Added || seen[j.Name] || j.Labels[contract.LabelWarm] != "" || time.Since(j.CreationTimestamp.Time) > 5*time.Second {
				continue
			}
			seen[j.Name] = true
			wg.Add(1)
			go func() {
				defer wg.Done()
				rec := r.record(ctx, j)
				b, _ := json.MarshalIndent(rec, "", " ")
				if err := os.WriteFile(filepath.Join(dir, j.Name+".json"), append(b, '\n'), 0o644); err != nil {
					t.Error(err)
				}
				t.Logf("%s: %d events, %s", j.Name, len(rec.Events), rec.Outcome)
			}()
		}
	}
	wg.Wait()
}

// record follows one cold Job as Runner.follow does and returns every event its state machine was fed.
func (r *Runner) record(ctx context.Context, job *batchv1.Job) *recording {
	rec := &recording{Job: job.Name, DeadlineSeconds: ptr.Deref(job.Spec.ActiveDeadlineSeconds, 0)}
	admitted := time.Now()
	_, err := r.drive(ctx, job, func(ev coldEvent) { rec.Events = append(rec.Events, recorded(ev, admitted)) },
		func(st Stage) { rec.Stages = append(rec.Stages, st) })
	rec.Outcome = "finished"
	if err != nil {
		rec.Outcome = err.Error()
	}
	return rec
}

// recording is one cold call's events as testdata/cold holds them. Stages and Outcome are what the state
// machine made of them when they were recorded: a note for the reader; the replay test checks Want.
type recording struct {
	Source          string          `json:"source,omitempty"`
	Job             string          `json:"job"`
	DeadlineSeconds int64           `json:"deadlineSeconds"`
	Events          []recordedEvent `json:"events"`
	Stages          []Stage         `json:"stagesWhenRecorded,omitempty"`
	Outcome         string          `json:"outcomeWhenRecorded,omitempty"`
}

func recorded(ev coldEvent, admitted time.Time) recordedEvent {
	out := recordedEvent{Ms: ev.At.Sub(admitted).Milliseconds(), Kind: ev.Kind, What: ev.What, Pod: trimPod(ev.Pod), Job: trimJob(ev.Job)}
	if ev.Err != nil {
		out.Error = &recordedError{Message: ev.Err.Error()}
		var st apierrors.APIStatus
		if errors.As(ev.Err, &st) {
			out.Error.Code, out.Error.Reason = st.Status().Code, string(st.Status().Reason)
		}
	}
	return out
}

// trimPod keeps what the state machine reads, and nothing of the tool's arguments or environment.
func trimPod(p *corev1.Pod) *corev1.Pod {
	if p == nil {
		return nil
	}
	out := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Labels: map[string]string{"job-name": p.Labels["job-name"]}}}
	for _, c := range p.Spec.InitContainers {
		out.Spec.InitContainers = append(out.Spec.InitContainers, corev1.Container{Name: c.Name, Lifecycle: c.Lifecycle})
	}
	for _, c := range p.Spec.Containers {
		out.Spec.Containers = append(out.Spec.Containers, corev1.Container{Name: c.Name})
	}
	out.Status = corev1.PodStatus{Phase: p.Status.Phase, Reason: p.Status.Reason, Message: p.Status.Message,
		InitContainerStatuses: trimStatuses(p.Status.InitContainerStatuses), ContainerStatuses: trimStatuses(p.Status.ContainerStatuses)}
	return out
}

func trimStatuses(in []corev1.ContainerStatus) []corev1.ContainerStatus {
	var out []corev1.ContainerStatus
	for _, s := range in {
		s := s.DeepCopy()
		out = append(out, corev1.ContainerStatus{Name: s.Name, State: s.State, LastTerminationState: s.LastTerminationState,
			Ready: s.Ready, RestartCount: s.RestartCount, Started: s.Started})
	}
	for i := range out {
		for _, t := range []*corev1.ContainerStateTerminated{out[i].State.Terminated, out[i].LastTerminationState.Terminated} {
			if t != nil {
				t.ContainerID = ""
				t.Message = strings.TrimSpace(t.Message)
			}
		}
	}
	return out
}

func trimJob(j *batchv1.Job) *batchv1.Job {
	if j == nil {
		return nil
	}
	return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: j.Name}, Spec: batchv1.JobSpec{ActiveDeadlineSeconds: j.Spec.ActiveDeadlineSeconds},
		Status: batchv1.JobStatus{Conditions: j.Status.Conditions, Active: j.Status.Active, Succeeded: j.Status.Succeeded, Failed: j.Status.Failed}}
}
