package audit

import (
	"testing"
	"time"
)

// unlandedClaim writes one call as the MCP server does when its warm claim was admitted and anchored but
// never stored: tool.request, guardrail.decision, the head (sent with the claim, and with the cold Job),
// then the call on the cold Job, or on the warm Job when ranWarm is set (the log of a call that did run on
// its claim). It returns the claim's anchor and the cold Job's.
func unlandedClaim(t *testing.T, l *Log, clock *anchorClock, id string, ranWarm, finished bool) (warm, cold Anchor) {
	t.Helper()
	write := callWriter(t, l, id)
	head := admitCall(t, l, write, demoRequest, allowed)
	warm = Anchor{Name: "anchor-" + id + "-warm", RequestID: id, Head: head, Tool: "kubectl_get", Job: "as-kubectl-get-w0000000000a",
		Pod: "as-kubectl-get-w0000000000a-x", PodUID: "0b9c6f0e-1111-4222-8333-444455556666", PodResourceVersion: "1041",
		Admitted: clock.now(), Deadline: time.Minute}
	cold = Anchor{Name: "anchor-" + id + "-cold", RequestID: id, Head: head, Tool: "kubectl_get", Job: "as-kubectl-get-" + id,
		Admitted: clock.now(), Deadline: time.Minute}
	job := cold.Job
	if ranWarm {
		job = warm.Job
	}
	write(EventSandboxStarted, map[string]any{"job": job})
	if finished {
		write(EventSandboxCompleted, map[string]any{"job": job, "exit_code": 0})
		write(EventToolResult, map[string]any{"is_error": false})
	}
	return warm, cold
}

// voidOf is the pool's mark for anchor a with evidence e.
func voidOf(a Anchor, e VoidEvidence) *Void {
	v := &Void{Name: "void-" + a.Name, Anchor: a.Name, RequestID: a.RequestID, Job: a.Job, Head: a.Head, PodUID: a.PodUID,
		PodResourceVersion: a.PodResourceVersion, Evidence: e, Voided: a.Admitted.Add(time.Minute)}
	switch e {
	case VoidClaimedByAnother:
		v.ClaimedBy = "req-999999999999"
	case VoidPodChanged:
		v.ObservedResourceVersion = "1077"
	case VoidPodEvicted:
		v.ObservedResourceVersion = a.PodResourceVersion
	}
	return v
}

func withVoid(a Anchor, v *Void) Anchor {
	a.Void = v
	return a
}

// TestVerifyAnchorsVoid: a warm claim that was anchored but never stored is judged by the call's own lines
// when the pool voided it (VOID, not a failure) — and only then: without the mark, with a mark that does
// not prove the claim never landed, with a mark for another anchor, or when the log itself says the warm
// Job ran the call, it is judged as every anchor is, and fails once the call's deadline has passed.
func TestVerifyAnchorsVoid(t *testing.T) {
	clock := &anchorClock{t: anchorT0}
	dir := t.TempDir()
	lElse, pElse := openAnchored(t, clock, dir, "elsewhere.jsonl")
	warm, cold := unlandedClaim(t, lElse, clock, "req-aaaaaaaaaaaa", false, true)
	lRan, pRan := openAnchored(t, clock, dir, "ran-warm.jsonl")
	ranWarm, _ := unlandedClaim(t, lRan, clock, "req-bbbbbbbbbbbb", true, true)
	lOpen, pOpen := openAnchored(t, clock, dir, "unfinished.jsonl")
	open1, _ := unlandedClaim(t, lOpen, clock, "req-cccccccccccc", false, false)
	lCut, pCut := openAnchored(t, clock, dir, "cut.jsonl")
	cutWarm, _ := unlandedClaim(t, lCut, clock, "req-dddddddddddd", false, true)
	later := clock.t.Add(time.Hour) // every deadline has passed
	soon := open1.Admitted.Add(10 * time.Second)
	cutLines := readLines(t, pCut)
	cutLines = cutLines[:1] // only the call's tool.request: the line its head is the hash of is gone
	writeLines(t, pCut, cutLines)

	claimedHere := voidOf(warm, VoidClaimedByAnother)
	claimedHere.ClaimedBy = warm.RequestID
	sameRV := voidOf(warm, VoidPodChanged)
	sameRV.ObservedResourceVersion = warm.PodResourceVersion
	evictedLater := voidOf(warm, VoidPodEvicted)
	evictedLater.ObservedResourceVersion = "1077"
	unknown := voidOf(warm, "looked-fine")
	tests := []struct {
		name    string
		log     string
		anchors []Anchor
		now     time.Time
		want    map[string]AnchorStatus
		reason  map[string]string
	}{
		{name: "no void: a claim that never landed fails like a call cut from the log", log: pElse, anchors: []Anchor{warm, cold}, now: later,
			want:   map[string]AnchorStatus{warm.Name: AnchorFailed, cold.Name: AnchorOK},
			reason: map[string]string{warm.Name: "no sandbox.started of Job " + warm.Job}},
		{name: "no void, within the deadline: in progress", log: pElse, anchors: []Anchor{warm, cold}, now: warm.Admitted.Add(10 * time.Second),
			want: map[string]AnchorStatus{warm.Name: AnchorInProgress, cold.Name: AnchorOK}},
		{name: "void, the call logged on another Job: claimed by another request", log: pElse, anchors: []Anchor{withVoid(warm, voidOf(warm, VoidClaimedByAnother)), cold}, now: later,
			want:   map[string]AnchorStatus{warm.Name: AnchorVoid, cold.Name: AnchorOK},
			reason: map[string]string{warm.Name: "claimed but never stored: the claim of warm Job " + warm.Job + " never landed (its warm Pod was claimed by req-999999999999"}},
		{name: "void: the Pod changed unclaimed", log: pElse, anchors: []Anchor{withVoid(warm, voidOf(warm, VoidPodChanged)), cold}, now: later,
			want: map[string]AnchorStatus{warm.Name: AnchorVoid, cold.Name: AnchorOK}, reason: map[string]string{warm.Name: "from resourceVersion 1041 to 1077"}},
		{name: "void: the Pod deleted unclaimed", log: pElse, anchors: []Anchor{withVoid(warm, voidOf(warm, VoidPodDeleted)), cold}, now: later,
			want: map[string]AnchorStatus{warm.Name: AnchorVoid, cold.Name: AnchorOK}, reason: map[string]string{warm.Name: "deleted unclaimed"}},
		{name: "void: the Pod evicted unclaimed at the claim's resourceVersion", log: pElse, anchors: []Anchor{withVoid(warm, voidOf(warm, VoidPodEvicted)), cold}, now: later,
			want: map[string]AnchorStatus{warm.Name: AnchorVoid, cold.Name: AnchorOK}, reason: map[string]string{warm.Name: "the call closed at line 5"}},
		{name: "void, but the log says the warm Job ran the call", log: pRan, anchors: []Anchor{withVoid(ranWarm, voidOf(ranWarm, VoidClaimedByAnother))}, now: later,
			want: map[string]AnchorStatus{ranWarm.Name: AnchorFailed}, reason: map[string]string{ranWarm.Name: "the log or the mark is false"}},
		{name: "void whose Pod carried this call's own claim: not honoured", log: pElse, anchors: []Anchor{withVoid(warm, claimedHere), cold}, now: later,
			want: map[string]AnchorStatus{warm.Name: AnchorFailed, cold.Name: AnchorOK}, reason: map[string]string{warm.Name: "is not honoured: the Pod it names carried this call's own claim"}},
		{name: "void of a Pod that had not changed: not honoured", log: pElse, anchors: []Anchor{withVoid(warm, sameRV)}, now: later,
			want: map[string]AnchorStatus{warm.Name: AnchorFailed}, reason: map[string]string{warm.Name: "had not changed"}},
		{name: "void of an eviction at another resourceVersion: not honoured", log: pElse, anchors: []Anchor{withVoid(warm, evictedLater)}, now: later,
			want: map[string]AnchorStatus{warm.Name: AnchorFailed}, reason: map[string]string{warm.Name: "not at the resourceVersion"}},
		{name: "void with unknown evidence: not honoured", log: pElse, anchors: []Anchor{withVoid(warm, unknown)}, now: later,
			want: map[string]AnchorStatus{warm.Name: AnchorFailed}, reason: map[string]string{warm.Name: "unknown evidence"}},
		{name: "void of another anchor: not honoured", log: pElse, anchors: []Anchor{withVoid(warm, voidOf(ranWarm, VoidPodDeleted))}, now: later,
			want: map[string]AnchorStatus{warm.Name: AnchorFailed}, reason: map[string]string{warm.Name: "does not name this anchor's claim"}},
		{name: "void on a cold Job's anchor: not honoured", log: pOpen, anchors: []Anchor{withVoid(Anchor{Name: "anchor-x", RequestID: open1.RequestID, Head: open1.Head,
			Tool: "kubectl_get", Job: "as-other", Admitted: open1.Admitted, Deadline: time.Minute}, voidOf(open1, VoidPodDeleted))}, now: later,
			want: map[string]AnchorStatus{"anchor-x": AnchorFailed}, reason: map[string]string{"anchor-x": "a cold Job's"}},
		{name: "void, the call not closed yet: in progress", log: pOpen, anchors: []Anchor{withVoid(open1, voidOf(open1, VoidPodDeleted))}, now: soon,
			want: map[string]AnchorStatus{open1.Name: AnchorInProgress}, reason: map[string]string{open1.Name: "claimed but never stored"}},
		{name: "void, the call never closed: fails after its deadline", log: pOpen, anchors: []Anchor{withVoid(open1, voidOf(open1, VoidPodDeleted))}, now: later,
			want: map[string]AnchorStatus{open1.Name: AnchorFailed}, reason: map[string]string{open1.Name: "no tool.result follows its head"}},
		{name: "void does not excuse a head that is no line of the log", log: pCut, anchors: []Anchor{withVoid(cutWarm, voidOf(cutWarm, VoidPodDeleted))}, now: later,
			want: map[string]AnchorStatus{cutWarm.Name: AnchorFailed}, reason: map[string]string{cutWarm.Name: "no line of this log"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, rep, err := VerifyFilesAnchors([]string{tt.log}, tt.anchors, tt.now)
			if err != nil {
				t.Fatal(err)
			}
			checkAnchorReport(t, rep, byName, tt.want, tt.reason)
		})
	}
}
