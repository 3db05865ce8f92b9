package audit

import (
	"fmt"
	"time"
)

// Void marks. The webhook records a warm claim's anchor when it admits the claim, before the API server
// stores it; a replica that dies in between (or a claim that loses the race for its Pod's resourceVersion)
// leaves an anchor of a warm Job that never served the call, which the MCP server then ran on another Job
// or gave up. The log is right not to have that Job's sandbox, but the anchor alone cannot tell this from
// a call cut from the log. The warm pool, which sees the claimed Pod, can: when the cluster shows that the
// claim can never have landed, it records a Void for the anchor, and verification judges the anchor by
// the call's own lines around its head instead of by the Job's sandbox. Any other Job the call ran on was
// admitted, so it has an anchor of its own, judged as usual: a void never hides a run.

// VoidEvidence says what the pool saw that proves a claim never landed. A claim is an UPDATE of the warm
// Pod admitted against one resourceVersion of it, and the API server stores it only if the Pod is still at
// that resourceVersion (a retry is admitted anew, and the claim ledger refuses it as a replay); a claim,
// once stored, never goes away.
type VoidEvidence string

// The evidence a Void may carry.
const (
	// VoidClaimedByAnother: the Pod carries the claim of another request (ClaimedBy); a Pod is claimed once.
	VoidClaimedByAnother VoidEvidence = "claimed-by-another"
	// VoidPodChanged: the Pod was seen unclaimed at another resourceVersion (ObservedResourceVersion) than
	// the one the claim was admitted against, so the claim can no longer be stored.
	VoidPodChanged VoidEvidence = "changed-unclaimed"
	// VoidPodDeleted: the Pod was seen being deleted, unclaimed; a Pod being deleted takes no claim.
	VoidPodDeleted VoidEvidence = "deleted-unclaimed"
	// VoidPodEvicted: the pool evicted the Pod with the precondition that it is still, unclaimed, at the
	// resourceVersion the claim was admitted against (ObservedResourceVersion), so that it was never stored.
	VoidPodEvicted VoidEvidence = "evicted-unclaimed"
)

// Void is the warm pool's record that the claim an anchor records was never stored: the anchored warm Job
// never served the call. It repeats what it voids, and verification honours it only for exactly that claim.
type Void struct {
	// Name is the record's name in the cluster, for messages.
	Name string
	// Anchor is the name of the anchor it voids (Anchor.Name).
	Anchor string
	// RequestID, Job, Head, PodUID and PodResourceVersion are the voided anchor's.
	RequestID, Job, Head, PodUID, PodResourceVersion string
	// Evidence is what the pool saw.
	Evidence VoidEvidence
	// ClaimedBy is the request whose claim the Pod carries (VoidClaimedByAnother).
	ClaimedBy string
	// ObservedResourceVersion is the Pod's resourceVersion the pool saw (VoidPodChanged, VoidPodEvicted).
	ObservedResourceVersion string
	// Voided is when the pool recorded it (the cluster's clock).
	Voided time.Time
}

// Describe says in a few words what the pool saw.
func (v *Void) Describe() string {
	switch v.Evidence {
	case VoidClaimedByAnother:
		return "its warm Pod was claimed by " + v.ClaimedBy
	case VoidPodChanged:
		return fmt.Sprintf("its warm Pod changed, unclaimed, from resourceVersion %s to %s", v.PodResourceVersion, v.ObservedResourceVersion)
	case VoidPodDeleted:
		return "its warm Pod was deleted unclaimed"
	case VoidPodEvicted:
		return fmt.Sprintf("the pool evicted its warm Pod, unclaimed, at resourceVersion %s", v.ObservedResourceVersion)
	}
	return "evidence " + string(v.Evidence)
}

// Refutes says why v does not void anchor a ("" when it does): it must be for a warm claim, name exactly
// that claim, and carry evidence that is a proof that it never landed.
func (v *Void) Refutes(a Anchor) string {
	switch {
	case a.PodUID == "":
		return "the anchor is a cold Job's, which no pool claims"
	case v.Anchor != a.Name || v.RequestID != a.RequestID || v.Job != a.Job || v.Head != a.Head || v.PodUID != a.PodUID ||
		v.PodResourceVersion != a.PodResourceVersion:
		return "the mark does not name this anchor's claim"
	}
	switch v.Evidence {
	case VoidClaimedByAnother:
		if v.ClaimedBy == "" || v.ClaimedBy == a.RequestID {
			return "the Pod it names carried this call's own claim"
		}
	case VoidPodChanged:
		if v.ObservedResourceVersion == "" || v.ObservedResourceVersion == a.PodResourceVersion {
			return "the Pod it names had not changed since the claim was admitted"
		}
	case VoidPodEvicted:
		if v.ObservedResourceVersion != a.PodResourceVersion {
			return "the eviction it names was not at the resourceVersion the claim was admitted against"
		}
	case VoidPodDeleted:
	default:
		return fmt.Sprintf("unknown evidence %q", v.Evidence)
	}
	return ""
}

// judgeVoid judges an anchor that carries a void mark, whose head is line h of the log, at or after the
// call's tool.request. A log that says the anchored Job started the call contradicts the mark: FAIL. A
// mark that is not honoured leaves the anchor to the usual judgment (ok false). An honoured one needs the
// call closed after its head (its tool.result), wherever it ran.
func (c *AnchorCheck) judgeVoid(a Anchor, res AnchorResult, h int, running bool) (AnchorResult, string, bool) {
	v, cl := a.Void, c.calls[a.RequestID]
	for _, s := range cl.started {
		if s.line > h && s.job == a.Job {
			res.Status = AnchorFailed
			res.Reason = fmt.Sprintf("the cluster marks the claim of Job %s void (never stored: %s), yet the log says that Job started the call at line %d: the log or the mark is false",
				a.Job, v.Describe(), s.line)
			return res, "", true
		}
	}
	if why := v.Refutes(a); why != "" {
		return res, fmt.Sprintf("; its void mark %s is not honoured: %s", v.Name, why), false
	}
	never := fmt.Sprintf("claimed but never stored: the claim of warm Job %s never landed (%s, %s)", a.Job, v.Describe(), v.Voided.UTC().Format(time.RFC3339))
	for _, r := range cl.results {
		if r > h {
			res.Status = AnchorVoid
			res.Reason = fmt.Sprintf("%s; head at line %d, the call closed at line %d", never, h, r)
			return res, "", true
		}
	}
	if running {
		res.Status = AnchorInProgress
		res.Reason = fmt.Sprintf("%s; head at line %d, no tool.result yet; the call may run until %s", never, h,
			a.Admitted.Add(a.Deadline+AnchorGrace).UTC().Format(time.RFC3339))
		return res, "", true
	}
	res.Status = AnchorFailed
	res.Reason = fmt.Sprintf("%s; but no tool.result follows its head at line %d: the log was cut or rewritten after line %d, or the server died during the call", never, h, h)
	return res, "", true
}
