//go:build integration

package integration

import (
	"context"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/agent-sandbox/agent-sandbox/internal/audit"
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
}

func (a *answerLost) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := a.next.RoundTrip(req)
	if err != nil || req.Method != http.MethodPost || !strings.HasSuffix(req.URL.Path, "/jobs") {
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

// TestUnansweredCreateLeavesNoJob: a real kube-apiserver stores a call's Job, and its answer is lost (the
// connection breaks, or the call is cancelled, after the create went out). Before, Run returned the error
// and left the Job to run on its own — for an approved apply, the apply, although the caller was told its
// call was cancelled and its Job deleted; now the Job is gone when Run returns.
func TestUnansweredCreateLeavesNoJob(t *testing.T) {
	api := harness.StartAPIServer(t)
	p, err := policy.LoadFile("../../policy/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ns := p.Spec.Sandbox.Namespace
	if _, err := api.Clientset.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tool, _ := p.Tool("k8s_get_pod_status")
	inv, err := tool.Invoke(corpus.PodParams())
	if err != nil {
		t.Fatal(err)
	}
	for i, cancelled := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		lost := &answerLost{}
		if cancelled {
			lost.cancel = cancel
		}
		cfg := rest.CopyConfig(api.Config)
		cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { lost.next = rt; return lost }
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		id := []string{"req-aaaaaaaaaaaa", "req-bbbbbbbbbbbb"}[i]
		job, err := sandbox.RenderJob(p, sandbox.JobSpec{Invocation: inv, RequestID: id, AuditHead: strings.Repeat("0", 64)})
		if err != nil {
			t.Fatal(err)
		}
		_, err = sandbox.NewRunner(cs, ns, 1).Run(ctx, job, nil)
		cancel()
		if err == nil || lost.lost != 1 {
			t.Fatalf("Run: %v after %d lost answers, want an error after one", err, lost.lost)
		}
		if errors.Is(err, context.Canceled) != cancelled {
			t.Errorf("Run: %v; cancelled %v, want %v", err, errors.Is(err, context.Canceled), cancelled)
		}
		t.Logf("the call's error: %v", err)
		if _, err := api.Clientset.BatchV1().Jobs(ns).Get(context.Background(), job.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the Job %s the API server stored for the unanswered create: %v, want it deleted", job.Name, err)
		}
	}
}

// TestRecoverFindsApprovalJobs: a server killed between creating a call's Job and recording it leaves a Job
// that only the cluster knows of, and the next server's Recover deletes it. A Job with approvals is named
// after its tokens, not the request: Recover used to look for the request's name only, so a killed server's
// approved apply ran on, and its call was closed as abandoned with no Job deleted.
func TestRecoverFindsApprovalJobs(t *testing.T) {
	api := harness.StartAPIServer(t)
	ctx := context.Background()
	p, err := policy.LoadFile("../../policy/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ns := p.Spec.Sandbox.Namespace
	if _, err := api.Clientset.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tool, _ := p.Tool("k8s_get_pod_status")
	inv, err := tool.Invoke(corpus.PodParams())
	if err != nil {
		t.Fatal(err)
	}
	log, err := audit.Open(filepath.Join(t.TempDir(), "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	create := func(id string, tokens []string) string {
		t.Helper()
		if err := log.Write(audit.Event{RequestID: id, Name: audit.EventToolRequest, Tool: tool.Name, Fields: map[string]any{service.FieldServer: "srv-dead"}}); err != nil {
			t.Fatal(err)
		}
		job, err := sandbox.RenderJob(p, sandbox.JobSpec{Invocation: inv, RequestID: id, ApprovalTokens: tokens, AuditHead: strings.Repeat("0", 64)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := api.Clientset.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return job.Name
	}
	approved := create("req-aaaaaaaaaaaa", []string{"eyJhbGciOiJFZERTQSJ9.eyJqdGkiOiJ4In0.c2ln"})
	cold := create("req-bbbbbbbbbbbb", nil)
	if approved != sandbox.ApprovalJobName(tool.Name, "eyJhbGciOiJFZERTQSJ9.eyJqdGkiOiJ4In0.c2ln") || approved == sandbox.JobName(tool.Name, "req-aaaaaaaaaaaa") {
		t.Fatalf("the Job with approvals is named %s, not after its tokens", approved)
	}

	s := &service.Service{Audit: log, Instance: "srv-next"}
	rec, err := s.Recover(ctx, sandbox.NewRunner(api.Clientset, ns, 1), func(string) bool { return false })
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
	left, err := api.Clientset.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range left.Items {
		t.Errorf("Job %s of an abandoned call is still there", j.Name)
	}
}
