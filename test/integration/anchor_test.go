//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app"
	"github.com/agent-sandbox/agent-sandbox/internal/audit"
	"github.com/agent-sandbox/agent-sandbox/internal/ledger"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/service"
	"github.com/agent-sandbox/agent-sandbox/test/corpus"
	"github.com/agent-sandbox/agent-sandbox/test/harness"
	"github.com/agent-sandbox/agent-sandbox/webhook"
)

// TestAuditAnchorsAgainstCluster: three calls write their audit chain as the MCP server does, and each
// call's Job, as the real API server returns it, is admitted by the webhook's checker, which records its
// anchor through the real ConfigMap ledger. The real `audit verify --against-cluster`, reading the anchors
// with a kubeconfig, passes the log that made them and fails the same log with its last call cut off, and
// the log rewritten with valid hashes. Prune removes the anchors once their retention has passed.
func TestAuditAnchorsAgainstCluster(t *testing.T) {
	api := harness.StartAPIServer(t)
	ctx := context.Background()
	p, err := policy.LoadFile("../../policy/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{ledgerNamespace, p.Spec.Sandbox.Namespace} {
		if _, err := api.Clientset.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	direct := newClient(t, api.Config)
	records := &ledger.ConfigMapLedger{Client: direct, Namespace: ledgerNamespace}
	checker := &webhook.Checker{Anchors: records, Pods: records, AnchorRetention: time.Hour}
	checker.SetPolicy(p)
	const mcpUser = "system:serviceaccount:agent-sandbox:agent-sandbox-mcp"

	dir := t.TempDir()
	path := filepath.Join(dir, "audit.jsonl")
	log, err := audit.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	tool, _ := p.Tool("k8s_get_pod_status")
	inv, err := tool.Invoke(corpus.PodParams())
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"req-aaaaaaaaaaaa", "req-bbbbbbbbbbbb", "req-cccccccccccc"} {
		write := func(name string, fields map[string]any) {
			t.Helper()
			if err := log.Write(audit.Event{RequestID: id, Name: name, Tool: tool.Name, Fields: fields}); err != nil {
				t.Fatal(err)
			}
		}
		write(audit.EventToolRequest, map[string]any{"params": corpus.PodParams()})
		write(audit.EventGuardrailDecision, map[string]any{"decision": "allow"})
		head, err := log.Head()
		if err != nil {
			t.Fatal(err)
		}
		j, err := sandbox.RenderJob(p, sandbox.JobSpec{Invocation: inv, RequestID: id, AuditHead: head})
		if err != nil {
			t.Fatal(err)
		}
		webhook.Inject(&j.Spec.Template.ObjectMeta, &j.Spec.Template.Spec, p, inv)
		// What the API server hands the validating webhook: defaulted, with its UID (a dry run stores nothing).
		got, err := api.Clientset.BatchV1().Jobs(j.Namespace).Create(ctx, j, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			t.Fatal(err)
		}
		got.APIVersion, got.Kind = "batch/v1", "Job"
		raw, err := json.Marshal(got)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := checker.CheckJobRaw(ctx, webhook.Request{Operation: "CREATE", User: mcpUser, DryRun: true}, raw, nil); err != nil {
			t.Fatalf("%s, dry run: %v", id, err)
		}
		if _, err := checker.CheckJobRaw(ctx, webhook.Request{Operation: "CREATE", User: mcpUser}, raw, nil); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		write(audit.EventSandboxStarted, map[string]any{"job": j.Name, "warm": false})
		write(audit.EventCredentialIssued, map[string]any{"lease_id": "kubernetes/creds/x/" + id})
		write(audit.EventSandboxCompleted, map[string]any{"job": j.Name, "ok": true})
		write(audit.EventCredentialRevoked, map[string]any{"lease_id": "kubernetes/creds/x/" + id})
		write(audit.EventToolResult, map[string]any{"is_error": false})
	}
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}
	anchors, err := ledger.ListAnchors(ctx, direct, ledgerNamespace)
	if err != nil || len(anchors) != 3 {
		t.Fatalf("anchors in the API server: %d, %v; want 3 (the dry runs record none)", len(anchors), err)
	}
	for _, a := range anchors {
		if a.User != mcpUser || a.Tool != tool.Name || a.Deadline != tool.Deadline.Duration {
			t.Errorf("anchor %+v", a)
		}
	}

	verify := func(t *testing.T, file string) (int, string, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		code := app.Main(ctx, []string{"audit", "verify", "--against-cluster", "--file", file, "--kubeconfig", api.KubeconfigPath,
			"--namespace", ledgerNamespace, "--since", "1h", "--user", mcpUser}, strings.NewReader(""), &out, &errOut)
		t.Logf("exit %d:\n%s%s", code, out.String(), errOut.String())
		return code, out.String(), errOut.String()
	}
	lines := readAuditLines(t, path)
	writeLog := func(t *testing.T, lines []string) string {
		t.Helper()
		f := filepath.Join(t.TempDir(), "audit.jsonl")
		if err := os.WriteFile(f, []byte(strings.Join(lines, "")), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}

	t.Run("the log that made the anchors", func(t *testing.T) {
		code, out, errOut := verify(t, path)
		if code != 0 || errOut != "" || !strings.HasPrefix(out, "OK: 21 lines, chain intact") || !strings.Contains(out, "3 anchors in "+ledgerNamespace) ||
			!strings.Contains(out, ": 3 match, 0 do not, 0 in progress, 0 before this log") {
			t.Fatalf("exit %d\nstdout %s\nstderr %s", code, out, errOut)
		}
	})
	t.Run("the last call cut off", func(t *testing.T) {
		code, out, errOut := verify(t, writeLog(t, lines[:14]))
		if code != 4 || out != "" || strings.Count(errOut, "FAIL: call req-cccccccccccc") != 1 || !strings.Contains(errOut, "cut off the end") ||
			!strings.Contains(errOut, ": 2 match, 1 do not") {
			t.Fatalf("exit %d\nstdout %s\nstderr %s", code, out, errOut)
		}
	})
	t.Run("the last call's result not written yet", func(t *testing.T) {
		// Admitted a moment ago, within its deadline: the call may still be running.
		code, out, errOut := verify(t, writeLog(t, lines[:20]))
		if code != 0 || errOut != "" || !strings.HasPrefix(out, "IN PROGRESS: call req-cccccccccccc") || !strings.Contains(out, "no tool.result yet") ||
			!strings.Contains(out, ": 2 match, 0 do not, 1 in progress") {
			t.Fatalf("exit %d\nstdout %s\nstderr %s", code, out, errOut)
		}
	})
	t.Run("the whole chain rewritten with valid hashes", func(t *testing.T) {
		// The same events written afresh, the first call's namespace changed: a log that verifies on its own.
		recs, err := audit.ReadFile(path, audit.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		forged := filepath.Join(t.TempDir(), "audit.jsonl")
		i := 0
		fl, err := audit.Open(forged, audit.WithClock(func() time.Time { return recs[i].Time }))
		if err != nil {
			t.Fatal(err)
		}
		for ; i < len(recs); i++ {
			fields := recs[i].Fields
			if i == 0 {
				fields = map[string]any{"params": map[string]any{"namespace": "kube-system"}}
			}
			if err := fl.Write(audit.Event{RequestID: recs[i].RequestID, Name: recs[i].Event, Tool: recs[i].Tool, Fields: fields}); err != nil {
				t.Fatal(err)
			}
		}
		fl.Close()
		if _, err := audit.VerifyFile(forged); err != nil {
			t.Fatalf("the forged log does not verify on its own: %v", err)
		}
		code, out, errOut := verify(t, forged)
		if code != 4 || out != "" || strings.Count(errOut, "FAIL: call ") != 3 || !strings.Contains(errOut, ": 0 match, 3 do not") {
			t.Fatalf("exit %d\nstdout %s\nstderr %s", code, out, errOut)
		}
	})

	t.Run("prune after the retention", func(t *testing.T) {
		records.Now = func() time.Time { return time.Now().Add(30 * time.Minute) }
		if n, err := records.Prune(ctx); err != nil || n != 0 {
			t.Fatalf("prune within the retention: %d, %v", n, err)
		}
		records.Now = func() time.Time { return time.Now().Add(2 * time.Hour) }
		if n, err := records.Prune(ctx); err != nil || n != 3 {
			t.Fatalf("prune after the retention: %d, %v; want 3", n, err)
		}
		if anchors, err := ledger.ListAnchors(ctx, direct, ledgerNamespace); err != nil || len(anchors) != 0 {
			t.Fatalf("anchors left: %d, %v", len(anchors), err)
		}
	})
}

// readAuditLines returns the lines of an audit log, each with its '\n'.
func readAuditLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	return lines[:len(lines)-1]
}

// TestCreateRefusedAfterItsAnchor: the API server refuses a call's Job after the webhook admitted it and
// recorded its audit anchor — here a ResourceQuota, which the API server checks after every admission
// webhook; in `make chaos` a webhook replica killed as it recorded the anchor. Before, the call ended with
// its anchor naming a Job that never started: `audit verify --against-cluster` reported it in progress,
// then FAIL once its deadline passed. Now the MCP server's tool.result names the Job whose create failed,
// which settles the anchor: the real service, runner, webhook, API server and verifier.
func TestCreateRefusedAfterItsAnchor(t *testing.T) {
	env := startWebhookEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs, ns := env.api.Clientset, env.corpus.Namespace()
	q, err := cs.CoreV1().ResourceQuotas(ns).Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "no-jobs"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"count/jobs.batch": resource.MustParse("0")}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// No quota controller runs here: its status is written as the controller writes it.
	q.Status.Hard, q.Status.Used = q.Spec.Hard, corev1.ResourceList{"count/jobs.batch": resource.MustParse("0")}
	if _, err := cs.CoreV1().ResourceQuotas(ns).UpdateStatus(ctx, q, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	path := filepath.Join(t.TempDir(), "audit.jsonl")
	log, err := audit.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	s := &service.Service{Policy: env.corpus.Policy, Audit: log, Runner: sandbox.NewRunner(env.corpus.MCP, ns, 1), Instance: "srv-it"}
	_, err = s.Call(ctx, "k8s_get_pod_status", corpus.PodParams(), nil)
	var se *service.Error
	if !errors.As(err, &se) || !strings.Contains(se.Message, "exceeded quota") {
		t.Fatalf("the call with no Job allowed by the quota: %v; want it refused by the quota", err)
	}
	t.Logf("the call: %v", err)
	anchors, err := ledger.ListAnchors(ctx, newClient(t, env.api.Config), ledgerNamespace)
	if err != nil || len(anchors) != 1 || anchors[0].RequestID != se.RequestID {
		t.Fatalf("anchors %+v, %v; want the call's, recorded before the quota refused its Job: the test proves nothing", anchors, err)
	}
	if _, err := cs.BatchV1().Jobs(ns).Get(ctx, anchors[0].Job, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the anchored Job %s: %v; want it never stored", anchors[0].Job, err)
	}
	code, out, errOut := verifyAgainst(t, ctx, env.api.KubeconfigPath, path)
	if code != 0 || errOut != "" || !strings.Contains(out, ": 1 match, 0 do not, 0 in progress") {
		t.Fatalf("audit verify --against-cluster: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
}
