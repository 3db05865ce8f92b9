package ledger

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/agent-sandbox/agent-sandbox/internal/audit"
	"github.com/agent-sandbox/agent-sandbox/internal/contract"
)

const (
	testPodUID   = "0b9c6f0e-1111-4222-8333-444455556666"
	otherPodUID  = "0b9c6f0e-1111-4222-8333-777788889999"
	testWarmJob  = "as-k8s-get-pod-status-w0000000000a"
	testLedgerNS = "agent-sandbox-system"
)

// TestVoidRoundTrip: a warm claim's anchor names its Pod (in its data and its label); the pool's void mark
// of it is stored beside it, read back by ListAnchors with its anchor, and by ClaimAnchors for that Pod
// only, and pruned with it; a mark that does not name its anchor and Pod, or is malformed, is refused on
// the way in and on the way out.
func TestVoidRoundTrip(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).Build()
	l := &ConfigMapLedger{Client: c, Namespace: testLedgerNS, Now: func() time.Time { return now }}
	warm := audit.Anchor{RequestID: testRequestID, Head: testHead, Tool: "k8s_get_pod_status", Job: testWarmJob, User: testMCPUser,
		Admitted: now, Deadline: time.Minute, Pod: testWarmJob + "-abcde", PodUID: testPodUID, PodResourceVersion: "1041"}
	other := warm
	other.RequestID, other.Pod, other.PodUID = "req-bbbbbbbbbbbb", "as-k8s-get-pod-status-w0000000000b-abcde", otherPodUID
	other.Job = "as-k8s-get-pod-status-w0000000000b"
	cold := audit.Anchor{RequestID: "req-cccccccccccc", Head: testHead, Tool: "k8s_get_pod_status", Job: "as-k8s-get-pod-status-cccccccccccc", Admitted: now, Deadline: time.Minute}
	for _, a := range []audit.Anchor{warm, other, cold} {
		if err := l.RecordAnchor(ctx, a, now.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	var cm corev1.ConfigMap
	if err := c.Get(ctx, client.ObjectKey{Namespace: testLedgerNS, Name: AnchorName(warm.RequestID, warm.Job)}, &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Labels[contract.LabelClaimedPod] != testPodUID || cm.Data[anchorKeyPodResourceVersion] != "1041" {
		t.Fatalf("the claim's anchor: labels %v, data %v", cm.Labels, cm.Data)
	}
	warm.Name = cm.Name
	v := audit.Void{Anchor: warm.Name, RequestID: warm.RequestID, Job: warm.Job, Head: warm.Head, PodUID: warm.PodUID, PodResourceVersion: "1041",
		Evidence: audit.VoidPodEvicted, ObservedResourceVersion: "1041", Voided: now.Add(time.Minute)}
	for _, bad := range []func(v *audit.Void){
		func(v *audit.Void) { v.Anchor = AnchorName(other.RequestID, other.Job) },
		func(v *audit.Void) { v.Head = "x" },
		func(v *audit.Void) { v.PodUID = "p" },
		func(v *audit.Void) { v.PodResourceVersion = "" },
		func(v *audit.Void) { v.ClaimedBy = "someone" },
		func(v *audit.Void) { v.Evidence = "" },
	} {
		w := v
		bad(&w)
		if err := l.RecordVoid(ctx, w, now.Add(time.Hour)); err == nil {
			t.Errorf("RecordVoid accepted %+v", w)
		}
	}
	if err := l.RecordVoid(ctx, v, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := l.RecordVoid(ctx, v, now.Add(time.Hour)); err != nil {
		t.Fatalf("a second RecordVoid of the same mark: %v", err)
	}

	all, err := ListAnchors(ctx, c, testLedgerNS)
	if err != nil || len(all) != 3 {
		t.Fatalf("ListAnchors: %d, %v", len(all), err)
	}
	for _, a := range all {
		switch {
		case a.Name == warm.Name && (a.Void == nil || a.Void.Evidence != audit.VoidPodEvicted || a.Void.Name != VoidName(warm.Name) || a.Void.Refutes(a) != ""):
			t.Errorf("the voided anchor read back as %+v, void %+v", a, a.Void)
		case a.Name != warm.Name && a.Void != nil:
			t.Errorf("anchor %s read back with a void", a.Name)
		}
	}
	got, err := l.ClaimAnchors(ctx, []types.UID{testPodUID})
	if err != nil || len(got) != 1 || got[0].Name != warm.Name || got[0].Void == nil || !got[0].Expires.Equal(now.Add(time.Hour)) {
		t.Fatalf("ClaimAnchors(the voided Pod) = %+v, %v", got, err)
	}
	if got, err := l.ClaimAnchors(ctx, []types.UID{otherPodUID, "0b9c6f0e-0000-4222-8333-444455556666"}); err != nil || len(got) != 1 || got[0].RequestID != other.RequestID || got[0].Void != nil {
		t.Fatalf("ClaimAnchors(the other Pod) = %+v, %v", got, err)
	}
	if _, err := l.ClaimAnchors(ctx, []types.UID{"x,y"}); err == nil {
		t.Error("ClaimAnchors accepted a UID that is no UID")
	}

	// A mark edited in the cluster no longer reads back.
	var vm corev1.ConfigMap
	if err := c.Get(ctx, client.ObjectKey{Namespace: testLedgerNS, Name: VoidName(warm.Name)}, &vm); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []func(cm *corev1.ConfigMap){
		func(cm *corev1.ConfigMap) { cm.Data[voidKeyAnchor] = AnchorName(other.RequestID, other.Job) },
		func(cm *corev1.ConfigMap) { cm.Labels[contract.LabelClaimedPod] = otherPodUID },
		func(cm *corev1.ConfigMap) { cm.Data[voidKeyVoided] = "later" },
	} {
		c := vm.DeepCopy()
		bad(c)
		if _, err := VoidFromConfigMap(c); err == nil {
			t.Errorf("VoidFromConfigMap accepted %v %v", c.Labels, c.Data)
		}
	}

	l.Now = func() time.Time { return now.Add(2 * time.Hour) }
	if n, err := l.Prune(ctx); err != nil || n != 4 {
		t.Fatalf("Prune after the retention: %d, %v; want the 3 anchors and the mark", n, err)
	}
}
