//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app"
	"github.com/agent-sandbox/agent-sandbox/internal/audit"
	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/ledger"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/webhook"
)

// dyingReplica is a webhook replica that dies right after it records a claim's anchor, before it answers:
// the anchor is in the API server, and the API server, without an answer, refuses the claim.
type dyingReplica struct {
	webhook.AnchorLedger
	armed atomic.Bool
}

func (d *dyingReplica) RecordAnchor(ctx context.Context, a audit.Anchor, expires time.Time) error {
	if err := d.AnchorLedger.RecordAnchor(ctx, a, expires); err != nil {
		return err
	}
	if a.PodUID != "" && d.armed.CompareAndSwap(true, false) {
		return errors.New("the replica died after recording the anchor")
	}
	return nil
}

// TestClaimNeverStoredIsVoided (docs/design/audit-anchors.md, "A claim admitted but never stored"), against
// a real kube-apiserver with the real webhook and the chart's RBAC: a warm claim is admitted and anchored by
// a replica that dies before the API server stores it; the call then runs cold. The claimed Pod, still as
// the claim found it, takes no other claim (claim-pending). The warm pool, as the webhook's identity, leaves
// the anchor alone while the claim may still be stored, then evicts the Pod at that resourceVersion (the API
// server refuses an eviction at another) and voids the anchor; a claim the API server did store is never
// voided, however late. `audit verify --against-cluster` reports the call's warm anchor as VOID and passes.
// The MCP server's identity can neither write a void mark nor evict a Pod.
func TestClaimNeverStoredIsVoided(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	hookUser, hookGroups := "system:serviceaccount:"+chartNamespace+":"+chartService, []string{"system:serviceaccounts", "system:serviceaccounts:" + chartNamespace, "system:authenticated"}
	replica := &dyingReplica{}
	w := startWarmCluster(t, ctx, func(c *webhook.Checker) {
		replica.AnchorLedger = c.Anchors
		c.Anchors = replica
		c.Identities.PoolUsers = append(c.Identities.PoolUsers, hookUser)
	})
	cs, ns := w.api.Clientset, w.ns
	if ns != chartSandboxNS || ledgerNamespace != chartNamespace {
		t.Fatalf("the policy's sandbox namespace %s and the ledger's %s are not the chart's %s and %s", ns, ledgerNamespace, chartSandboxNS, chartNamespace)
	}
	applyChartRBAC(t, ctx, w.direct)
	impersonate := func(user string, groups []string) (kubernetes.Interface, client.Client) {
		t.Helper()
		cfg := rest.CopyConfig(w.api.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
		k, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		c, err := client.New(cfg, client.Options{Scheme: w.scheme})
		if err != nil {
			t.Fatal(err)
		}
		return k, c
	}
	mcp, mcpClient := impersonate("system:serviceaccount:"+ns+":agent-sandbox-mcp", []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"})
	_, asWebhook := impersonate(hookUser, hookGroups)

	warmPod := func(suffix string) (*batchv1.Job, *corev1.Pod) {
		t.Helper()
		j, err := sandbox.RenderWarmJob(w.p, w.tool, suffix)
		if err != nil {
			t.Fatal(err)
		}
		if j, err = cs.BatchV1().Jobs(ns).Create(ctx, j, metav1.CreateOptions{}); err != nil {
			t.Fatalf("the warm Job was refused: %v", err)
		}
		for {
			pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=" + j.Name})
			if err == nil && len(pods.Items) == 1 {
				return j, &pods.Items[0]
			}
			select {
			case <-ctx.Done():
				t.Fatalf("no Pod for warm Job %s", j.Name)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	lostJob, lostPod := warmPod("w0000000000v")
	servedJob, servedPod := warmPod("w0000000000s")
	_, sparePod := warmPod("w0000000000t")

	log, path := openAuditLog(t)
	inv, err := w.tool.Invoke(map[string]any{"namespace": "demo-app"})
	if err != nil {
		t.Fatal(err)
	}
	begin := func(id string) string {
		t.Helper()
		logEvent(t, log, id, w.tool.Name, audit.EventToolRequest, map[string]any{"params": map[string]any{"namespace": "demo-app"}})
		logEvent(t, log, id, w.tool.Name, audit.EventGuardrailDecision, map[string]any{"decision": "allow"})
		head, err := log.Head()
		if err != nil {
			t.Fatal(err)
		}
		return head
	}
	ran := func(id, job string) {
		t.Helper()
		logEvent(t, log, id, w.tool.Name, audit.EventSandboxStarted, map[string]any{"job": job})
		logEvent(t, log, id, w.tool.Name, audit.EventSandboxCompleted, map[string]any{"job": job, "exit_code": 0})
		logEvent(t, log, id, w.tool.Name, audit.EventToolResult, map[string]any{"is_error": false})
	}
	claim := func(pod *corev1.Pod, id, head string) error {
		t.Helper()
		c, err := sandbox.RenderClaim(inv, id, nil, head)
		if err != nil {
			t.Fatal(err)
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": pod.ResourceVersion,
			"annotations": map[string]string{contract.AnnotationClaim: c}}})
		_, err = mcp.CoreV1().Pods(ns).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	}

	// The call: its claim admitted and anchored by a replica that dies before answering.
	const lost, other, served = "req-0000000000aa", "req-0000000000bb", "req-0000000000cc"
	head := begin(lost)
	replica.armed.Store(true)
	if err := claim(lostPod, lost, head); err == nil || !strings.Contains(err.Error(), "the replica died") {
		t.Fatalf("the claim whose replica died: %v, want it refused", err)
	}
	if p, err := cs.CoreV1().Pods(ns).Get(ctx, lostPod.Name, metav1.GetOptions{}); err != nil || p.Annotations[contract.AnnotationClaim] != "" || p.ResourceVersion != lostPod.ResourceVersion {
		t.Fatalf("the warm Pod after the lost claim: %v, %+v", err, p.ObjectMeta)
	}
	anchorOf := func(id, job string) audit.Anchor {
		t.Helper()
		all, err := ledger.ListAnchors(ctx, w.direct, ledgerNamespace)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range all {
			if a.RequestID == id && a.Job == job {
				return a
			}
		}
		t.Fatalf("no anchor of %s on Job %s among %d", id, job, len(all))
		return audit.Anchor{}
	}
	lostAnchor := anchorOf(lost, lostJob.Name)
	if lostAnchor.PodUID != string(lostPod.UID) || lostAnchor.PodResourceVersion != lostPod.ResourceVersion || lostAnchor.Void != nil {
		t.Fatalf("the lost claim's anchor: %+v", lostAnchor)
	}
	// The Pod as that claim found it takes no other claim while its fate is open.
	if err := claim(lostPod, other, head); err == nil || !strings.Contains(err.Error(), "claim-pending") || !strings.Contains(err.Error(), lost) {
		t.Fatalf("another claim on the Pod the lost claim left: %v, want claim-pending", err)
	}
	// The call runs cold (its request ID is used up for claims), as the MCP server runs it.
	cold, err := sandbox.RenderJob(w.p, sandbox.JobSpec{Invocation: inv, RequestID: lost, AuditHead: head})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mcp.BatchV1().Jobs(ns).Create(ctx, cold, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the call's cold Job: %v", err)
	}
	ran(lost, cold.Name)
	// Another call, claimed and stored.
	if err := claim(servedPod, served, begin(served)); err != nil {
		t.Fatalf("a claim: %v", err)
	}
	ran(served, servedJob.Name)
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}

	// The pool, as the webhook's identity under the chart's RBAC.
	start := time.Now()
	clock := start
	pool := &webhook.Pool{Client: asWebhook, Anchors: &ledger.ConfigMapLedger{Client: asWebhook, Namespace: ledgerNamespace},
		Policy: func() *policy.Compiled { return w.p }, ClaimKeys: w.signer.Keys(), Log: logr.Discard(), Now: func() time.Time { return clock }}
	if _, err := pool.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if a := anchorOf(lost, lostJob.Name); a.Void != nil {
		t.Fatalf("voided while the claim might still be stored: %+v", a.Void)
	}
	if _, err := cs.CoreV1().Pods(ns).Get(ctx, lostPod.Name, metav1.GetOptions{}); err != nil {
		t.Fatalf("the Pod was evicted while the claim might still be stored: %v", err)
	}
	code, out, errOut := verifyAgainst(t, ctx, w.api.KubeconfigPath, path)
	if code != 0 || !strings.Contains(out, "IN PROGRESS: call "+lost+" ("+w.tool.Name+", Job "+lostJob.Name) {
		t.Fatalf("before the pool settled it: exit %d\n%s%s", code, out, errOut)
	}

	// The fence the pool relies on: the API server evicts a Pod only at the resourceVersion named.
	stale, uid := "1", sparePod.UID
	err = cs.CoreV1().Pods(ns).EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: sparePod.Name, Namespace: ns},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &stale}}})
	if !apierrors.IsConflict(err) {
		t.Fatalf("an eviction at a resourceVersion the Pod is not at: %v, want a conflict", err)
	}

	// Past the grace: the Pod, still as the claim found it, is evicted, and the anchor voided.
	clock = start.Add(time.Minute)
	if _, err := pool.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	v := anchorOf(lost, lostJob.Name).Void
	if v == nil || v.Evidence != audit.VoidPodEvicted || v.ObservedResourceVersion != lostPod.ResourceVersion || v.PodUID != string(lostPod.UID) {
		t.Fatalf("the lost claim's void: %+v", v)
	}
	if p, err := cs.CoreV1().Pods(ns).Get(ctx, lostPod.Name, metav1.GetOptions{}); err == nil && p.DeletionTimestamp == nil {
		t.Fatal("the warm Pod of the lost claim was not evicted")
	}
	clock = start.Add(time.Hour)
	if _, err := pool.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if a := anchorOf(served, servedJob.Name); a.Void != nil {
		t.Fatalf("the stored claim was voided: %+v", a.Void)
	}
	if a := anchorOf(lost, cold.Name); a.Void != nil || a.PodUID != "" {
		t.Fatalf("the cold Job's anchor: %+v", a)
	}

	code, out, errOut = verifyAgainst(t, ctx, w.api.KubeconfigPath, path)
	if code != 0 || errOut != "" || !strings.Contains(out, "VOID: call "+lost+" ("+w.tool.Name+", Job "+lostJob.Name) ||
		!strings.Contains(out, "claimed but never stored") || !strings.Contains(out, "3 anchors in "+ledgerNamespace) ||
		!strings.Contains(out, ": 2 match, 0 do not, 0 in progress, 0 before this log, 1 claimed but never stored (void)") {
		t.Fatalf("after the pool settled it: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}

	// The MCP server's identity cannot write a void mark, read or delete the ledger, or evict a Pod.
	servedAnchor := anchorOf(served, servedJob.Name)
	forged := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: ledger.VoidName(servedAnchor.Name), Namespace: ledgerNamespace,
		Labels: map[string]string{contract.LabelAuditAnchorVoid: "true", contract.LabelClaimedPod: servedAnchor.PodUID}},
		Data: map[string]string{"anchor": servedAnchor.Name, "requestID": served, "job": servedJob.Name, "head": servedAnchor.Head, "podUID": servedAnchor.PodUID,
			"podResourceVersion": servedAnchor.PodResourceVersion, "evidence": string(audit.VoidPodDeleted), "voided": time.Now().UTC().Format(time.RFC3339Nano)}}
	if err := mcpClient.Create(ctx, forged); !apierrors.IsForbidden(err) {
		t.Fatalf("the MCP server wrote a void mark: %v, want Forbidden", err)
	}
	var list corev1.ConfigMapList
	if err := mcpClient.List(ctx, &list, client.InNamespace(ledgerNamespace)); !apierrors.IsForbidden(err) {
		t.Errorf("the MCP server listed the ledger: %v, want Forbidden", err)
	}
	if err := mcpClient.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: servedAnchor.Name, Namespace: ledgerNamespace}}); !apierrors.IsForbidden(err) {
		t.Errorf("the MCP server deleted an anchor: %v, want Forbidden", err)
	}
	if err := mcp.CoreV1().Pods(ns).EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: sparePod.Name, Namespace: ns}}); !apierrors.IsForbidden(err) {
		t.Errorf("the MCP server evicted a warm Pod: %v, want Forbidden", err)
	}
	if a := anchorOf(served, servedJob.Name); a.Void != nil {
		t.Fatalf("the stored claim carries a void: %+v", a.Void)
	}
}

// applyChartRBAC creates the Roles and RoleBindings the chart renders by default (the webhook's, the MCP
// server's) in the API server, so that impersonated clients have exactly the chart's permissions.
func applyChartRBAC(t *testing.T, ctx context.Context, c client.Client) {
	t.Helper()
	r := chartRenderArgs(t)
	for _, o := range append(r.find("Role", ""), r.find("RoleBinding", "")...) {
		o.create(t, ctx, c)
	}
}

func openAuditLog(t *testing.T) (*audit.Log, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := audit.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, path
}

func logEvent(t *testing.T, l *audit.Log, id, tool, name string, fields map[string]any) {
	t.Helper()
	if err := l.Write(audit.Event{RequestID: id, Name: name, Tool: tool, Fields: fields}); err != nil {
		t.Fatal(err)
	}
}

// verifyAgainst runs the real `audit verify --against-cluster` on the log at path, with kubeconfig, for
// the anchors of the last hour in the ledger's namespace.
func verifyAgainst(t *testing.T, ctx context.Context, kubeconfig, path string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := app.Main(ctx, []string{"audit", "verify", "--against-cluster", "--file", path, "--kubeconfig", kubeconfig,
		"--namespace", ledgerNamespace, "--since", "1h"}, strings.NewReader(""), &out, &errOut)
	t.Logf("audit verify --against-cluster: exit %d\n%s%s", code, out.String(), errOut.String())
	return code, out.String(), errOut.String()
}
