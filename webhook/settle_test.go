package webhook

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agent-sandbox/agent-sandbox/internal/audit"
	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/ledger"
)

// TestClaimFate: what a warm Pod, read after a claim's anchor, proves about the claim. Only a Pod that
// shows the claim cannot have been stored voids it; a Pod that carries the claim itself, or is unchanged
// since the claim's admission, or is another Pod, never does; an unchanged one is evicted once the claim
// had time to be stored.
func TestClaimFate(t *testing.T) {
	f := newFixture(t)
	now := f.now
	const uid = "a1b2c3d4-0000-4000-8000-000000000001"
	a := audit.Anchor{Name: "anchor-x", RequestID: testRequestID, Head: testHead, Job: "as-k8s-get-pod-status-w0123456789a",
		PodUID: uid, PodResourceVersion: "42", Admitted: now.Add(-time.Second)}
	pod := func(rv string, mut func(p *corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: uid, ResourceVersion: rv, Labels: map[string]string{contract.LabelWarm: "true"}}}
		if mut != nil {
			mut(p)
		}
		return p
	}
	claimed := func(id string) func(p *corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Annotations = map[string]string{contract.AnnotationClaim: f.claimFor(t, warmTestTool, podParams(), id, "")}
		}
	}
	old := a
	old.Admitted = now.Add(-claimSettleGrace - time.Second)
	for _, tc := range []struct {
		name   string
		a      audit.Anchor
		pod    *corev1.Pod
		want   audit.VoidEvidence // "" for no void
		by     string
		evict  bool
		seenRV string
	}{
		{name: "the claim stored: the Pod carries it", a: old, pod: pod("43", claimed(testRequestID))},
		{name: "the claim stored, the Pod being deleted", a: old, pod: pod("44", func(p *corev1.Pod) {
			claimed(testRequestID)(p)
			p.DeletionTimestamp = &metav1.Time{Time: now}
		})},
		{name: "another request's claim on the Pod", a: a, pod: pod("43", claimed("req-bbbbbbbbbbbb")), want: audit.VoidClaimedByAnother, by: "req-bbbbbbbbbbbb"},
		{name: "an unreadable claim on the Pod proves nothing", a: old, pod: pod("43", func(p *corev1.Pod) { p.Annotations = map[string]string{contract.AnnotationClaim: "{"} })},
		{name: "the Pod deleted unclaimed", a: a, pod: pod("42", func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: now} }), want: audit.VoidPodDeleted},
		{name: "the Pod changed unclaimed", a: a, pod: pod("57", nil), want: audit.VoidPodChanged, seenRV: "57"},
		{name: "the Pod unchanged, the claim may still be stored", a: a, pod: pod("42", nil)},
		{name: "the Pod unchanged past the grace: evict", a: old, pod: pod("42", nil), evict: true},
		{name: "another Pod", a: old, pod: pod("57", func(p *corev1.Pod) { p.UID = "a1b2c3d4-0000-4000-8000-000000000002" })},
		{name: "a cold Job's anchor", a: audit.Anchor{RequestID: testRequestID, Job: "as-x", Admitted: old.Admitted}, pod: pod("57", nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, evict := claimFate(tc.a, tc.pod, now)
			if evict != tc.evict {
				t.Errorf("evict = %v, want %v", evict, tc.evict)
			}
			switch {
			case tc.want == "" && v != nil:
				t.Fatalf("voided: %+v", v)
			case tc.want == "":
			case v == nil || v.Evidence != tc.want || v.ClaimedBy != tc.by || v.ObservedResourceVersion != tc.seenRV:
				t.Fatalf("void %+v, want evidence %s by %q at %q", v, tc.want, tc.by, tc.seenRV)
			}
		})
	}
}

// TestPoolSettlesClaims: a pass of the pool voids exactly the anchors whose warm Pods prove the claim was
// never stored — another request's claim on the Pod, the Pod deleted or changed unclaimed — records each
// mark once, keeps its anchor's expiry, and evicts a Pod left unclaimed under its claim past the grace,
// voiding that one too. The anchor of a claim the Pod carries is never voided, however late.
func TestPoolSettlesClaims(t *testing.T) {
	f := newFixture(t)
	ns := f.p.Spec.Sandbox.Namespace
	mk := func(name, uid string, mut func(p *corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID(uid),
			Labels: map[string]string{contract.LabelWarm: "true", contract.LabelTool: warmTestTool}}}
		if mut != nil {
			mut(p)
		}
		return p
	}
	const landed, lost, idle, gone, moved = "req-aaaaaaaaaaa2", "req-aaaaaaaaaaa3", "req-aaaaaaaaaaa1", "req-aaaaaaaaaaa4", "req-aaaaaaaaaaa5"
	claimedPod := mk("claimed", "a1b2c3d4-0000-4000-8000-00000000000b", func(p *corev1.Pod) {
		p.Annotations = map[string]string{contract.AnnotationClaim: f.claimFor(t, warmTestTool, podParams(), landed, "")}
	})
	idlePod := mk("idle", "a1b2c3d4-0000-4000-8000-00000000000a", nil)
	leaving := mk("leaving", "a1b2c3d4-0000-4000-8000-00000000000c", func(p *corev1.Pod) {
		p.DeletionTimestamp, p.Finalizers = &metav1.Time{Time: f.now}, []string{"test/keep"}
	})
	changed := mk("changed", "a1b2c3d4-0000-4000-8000-00000000000d", nil)
	pool, c := poolFixture(t, f, claimedPod, idlePod, leaving, changed)
	anchors := &memAnchorLedger{}
	pool.Anchors = anchors
	rv := func(p *corev1.Pod) string {
		t.Helper()
		var got corev1.Pod
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(p), &got); err != nil {
			t.Fatal(err)
		}
		return got.ResourceVersion
	}
	anchor := func(id string, p *corev1.Pod, podRV string) audit.Anchor {
		a := audit.Anchor{RequestID: id, Head: testHead, Tool: warmTestTool, Job: "as-k8s-get-pod-status-w0000000000" + id[len(id)-1:], Admitted: f.now,
			Deadline: time.Minute, Pod: p.Name, PodUID: string(p.UID), PodResourceVersion: podRV}
		if err := anchors.RecordAnchor(context.Background(), a, f.now.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		return a
	}
	anchor(landed, claimedPod, "1")    // the claim the Pod carries
	anchor(lost, claimedPod, "1")      // admitted against the same resourceVersion, lost to it
	anchor(idle, idlePod, rv(idlePod)) // never stored, the Pod as the claim found it
	anchor(gone, leaving, rv(leaving)) // never stored, the Pod since deleted
	anchor(moved, changed, "1")        // never stored, the Pod since changed
	made := map[string]time.Time{}     // when each void was first seen, by request
	voided := func() map[string]audit.VoidEvidence {
		out := map[string]audit.VoidEvidence{}
		anchors.mu.Lock()
		defer anchors.mu.Unlock()
		for _, v := range anchors.voids {
			out[v.RequestID] = v.Evidence
			if _, seen := made[v.RequestID]; !seen {
				made[v.RequestID] = pool.Now()
			}
			if v.Anchor != ledger.AnchorName(v.RequestID, v.Job) || v.PodUID == "" || !v.Voided.Equal(made[v.RequestID]) {
				t.Errorf("void %+v does not repeat its anchor, or was not made by the pass that found it", v)
			}
			if exp := anchors.voidExpires[v.Anchor]; !exp.Equal(anchors.expires[v.Anchor]) {
				t.Errorf("void of %s expires %s, its anchor %s", v.RequestID, exp, anchors.expires[v.Anchor])
			}
		}
		return out
	}

	if _, err := pool.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := map[string]audit.VoidEvidence{lost: audit.VoidClaimedByAnother, gone: audit.VoidPodDeleted, moved: audit.VoidPodChanged}
	if got := voided(); len(got) != len(want) || got[lost] != want[lost] || got[gone] != want[gone] || got[moved] != want[moved] {
		t.Fatalf("first pass voided %v, want %v", got, want)
	}
	if rv(idlePod) == "" {
		t.Fatal("the idle Pod was evicted within the grace")
	}

	// Past the grace the idle Pod, still as the claim found it, is evicted, and its claim voided.
	later := f.now.Add(claimSettleGrace + time.Second)
	pool.Now = func() time.Time { return later }
	if _, err := pool.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	var p corev1.Pod
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(idlePod), &p); err == nil {
		t.Error("the idle Pod under a claim never stored was not evicted")
	}
	got := voided()
	if got[idle] != audit.VoidPodEvicted || len(got) != 4 {
		t.Fatalf("second pass: voided %v, want %s evicted as well", got, idle)
	}
	if _, ok := got[landed]; ok {
		t.Fatalf("the claim the Pod carries was voided: %v", got)
	}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(claimedPod), &p); err != nil {
		t.Fatalf("the claimed Pod was evicted: %v", err)
	}
}
