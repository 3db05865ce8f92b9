package webhook

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agent-sandbox/agent-sandbox/internal/audit"
	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/ledger"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
)

// Settling claims that were anchored but never stored (docs/design/audit-anchors.md, "A claim admitted but
// never stored"). The webhook records a claim's audit anchor as the last step of admitting it, before the
// API server stores the claim; if the replica dies in between, or the claim loses its Pod to another one
// admitted against the same resourceVersion, the anchor names a warm Job that never served the call. The
// pool, which watches the warm Pods, settles such an anchor from the Pod itself, and records a void mark
// (audit.Void) only on proof that the claim can never have been stored:
//
//   - the Pod carries the claim of another request (a Pod is claimed once, for ever);
//   - the Pod is being deleted without a claim (a Pod being deleted takes none);
//   - the Pod is unclaimed at another resourceVersion than the one the claim was admitted against (the API
//     server stores an UPDATE only onto the resourceVersion it was admitted against; a retry is admitted
//     anew, and the claim ledger refuses it as a replay); or
//   - the Pod has stayed unclaimed at that very resourceVersion for claimSettleGrace, and the pool evicts
//     it with that resourceVersion as the precondition: after that eviction nothing can be stored onto it.
//
// The anchors are read before the Pods they are held against, so that a Pod seen at another resourceVersion
// is one read after the claim's admission, never an older copy. A claim the Pod shows to be this request's
// is never voided, nor is an anchor whose Pod is gone without the pool having seen it: it stays unsettled
// (and FAILs verification), the safe side.

// VoidLedger reads the anchors of warm claims and records the void marks of those that were never stored
// (ledger.ConfigMapLedger).
type VoidLedger interface {
	// ClaimAnchors reads the anchors of the claims admitted on the Pods with these UIDs, with their void
	// marks, from the API server.
	ClaimAnchors(ctx context.Context, pods []types.UID) ([]ledger.ClaimAnchor, error)
	// RecordVoid stores v, to be kept until expires.
	RecordVoid(ctx context.Context, v audit.Void, expires time.Time) error
}

// claimSettleGrace is how long after its admission a claim may still be on its way to the API server's
// storage: the webhook answers right after recording the anchor, and the API server stores the claim at
// once. A Pod left unclaimed at the claim's resourceVersion for longer is evicted, so that the anchor can be
// settled (an honest claim evicted this late merely goes cold: it can no longer be stored either way).
const claimSettleGrace = 30 * time.Second

// settleEvery is how often the pool looks at the claims' anchors when no warm Pod changed: an anchor
// appears without any change of its Pod when the claim was never stored.
const settleEvery = 10 * time.Second

// settleClaims settles the anchors of claims admitted on the warm Pods in pods (as the pass listed them),
// when a Pod changed since the last time or settleEvery passed.
func (p *Pool) settleClaims(ctx context.Context, ns string, pods []corev1.Pod, now time.Time) []error {
	if p.Anchors == nil || len(pods) == 0 {
		return nil
	}
	state := podsFingerprint(pods)
	p.settleMu.Lock()
	due := state != p.settledPods || !now.Before(p.settledAt.Add(settleEvery))
	p.settleMu.Unlock()
	if !due {
		return nil
	}
	uids := make([]types.UID, 0, len(pods))
	for i := range pods {
		uids = append(uids, pods[i].UID)
	}
	anchors, err := p.Anchors.ClaimAnchors(ctx, uids)
	if err != nil {
		return []error{fmt.Errorf("read the anchors of warm claims: %w", err)}
	}
	var open []ledger.ClaimAnchor
	for _, a := range anchors {
		if a.Void == nil {
			open = append(open, a)
		}
	}
	var errs []error
	if len(open) > 0 {
		// The Pods again, read after their anchors.
		var fresh corev1.PodList
		if err := p.Client.List(ctx, &fresh, client.InNamespace(ns), client.HasLabels{contract.LabelWarm}); err != nil {
			return []error{fmt.Errorf("list warm Pods of %s: %w", ns, err)}
		}
		byUID := map[string]*corev1.Pod{}
		for i := range fresh.Items {
			byUID[string(fresh.Items[i].UID)] = &fresh.Items[i]
		}
		for _, a := range open {
			if pod := byUID[a.PodUID]; pod != nil {
				if err := p.settle(ctx, a, pod, now); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	if len(errs) == 0 {
		p.settleMu.Lock()
		p.settledPods, p.settledAt = state, now
		p.settleMu.Unlock()
	}
	return errs
}

// settle records the void mark of a's claim if pod, read after a, proves that it was never stored,
// evicting pod first when only that can prove it.
func (p *Pool) settle(ctx context.Context, a ledger.ClaimAnchor, pod *corev1.Pod, now time.Time) error {
	v, evict := claimFate(a.Anchor, pod, now)
	if evict {
		evicted, err := p.evictAt(ctx, pod, a.PodResourceVersion)
		if err != nil || !evicted {
			return err
		}
		v = &audit.Void{Evidence: audit.VoidPodEvicted, ObservedResourceVersion: a.PodResourceVersion}
	}
	if v == nil {
		return nil
	}
	v.Anchor, v.RequestID, v.Job, v.Head = a.Name, a.RequestID, a.Job, a.Head
	v.PodUID, v.PodResourceVersion, v.Voided = a.PodUID, a.PodResourceVersion, now
	expires := a.Expires
	if expires.IsZero() {
		expires = a.Admitted.Add(DefaultAnchorRetention)
	}
	if err := p.Anchors.RecordVoid(ctx, *v, expires); err != nil {
		return err
	}
	p.Log.Info("voided the audit anchor of a claim that was never stored", "anchor", a.Name, "request", a.RequestID, "job", a.Job,
		"pod", pod.Name, "evidence", string(v.Evidence))
	return nil
}

// claimFate says what warm Pod pod, read after the anchor a, proves about a's claim: the evidence that it
// was never stored, or that only an eviction at the claim's resourceVersion can settle it (evict), or
// nothing (a claim that was stored, or one that may still be).
func claimFate(a audit.Anchor, pod *corev1.Pod, now time.Time) (v *audit.Void, evict bool) {
	if a.PodUID == "" || string(pod.UID) != a.PodUID {
		return nil, false
	}
	if raw := pod.Annotations[contract.AnnotationClaim]; raw != "" {
		c, err := sandbox.ParseClaim(raw)
		if err != nil || c.RequestID == a.RequestID {
			return nil, false // stored (or unreadable, which proves nothing)
		}
		return &audit.Void{Evidence: audit.VoidClaimedByAnother, ClaimedBy: c.RequestID}, false
	}
	switch {
	case pod.DeletionTimestamp != nil:
		return &audit.Void{Evidence: audit.VoidPodDeleted}, false
	case pod.ResourceVersion != a.PodResourceVersion:
		return &audit.Void{Evidence: audit.VoidPodChanged, ObservedResourceVersion: pod.ResourceVersion}, false
	}
	return nil, now.Sub(a.Admitted) > claimSettleGrace
}

// evictAt evicts warm Pod pod if it is still at resourceVersion rv (and is the same Pod): the eviction's
// precondition, which the API server checks as it deletes. It reports whether the Pod was evicted; a Pod
// that changed or is gone is not, and the next pass looks at it again (as it does after an error: one
// claimed since it was read is refused by the webhook, which evicts no claimed Pod).
func (p *Pool) evictAt(ctx context.Context, pod *corev1.Pod, rv string) (bool, error) {
	uid := pod.UID
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}}}
	err := p.Client.SubResource("eviction").Create(ctx, pod, ev)
	switch {
	case err == nil:
		p.Log.Info("evicted a warm Pod left unclaimed under a claim that was never stored", "pod", pod.Name, "resourceVersion", rv)
		return true, nil
	case apierrors.IsConflict(err), apierrors.IsNotFound(err):
		return false, nil
	}
	return false, fmt.Errorf("evict warm Pod %s: %w", pod.Name, err)
}

// podsFingerprint names the state of the warm Pods as the pass saw them: their UIDs and resourceVersions.
func podsFingerprint(pods []corev1.Pod) string {
	keys := make([]string, 0, len(pods))
	for i := range pods {
		keys = append(keys, string(pods[i].UID)+"@"+pods[i].ResourceVersion)
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}
