// Package ledger keeps the admission webhook's records in the API server, one immutable ConfigMap per
// entry in the webhook's namespace: the approval token IDs used (approval.Ledger), the Jobs that have had
// their Pod, the request IDs of warm-Pod claims, the calls' audit anchors and the warm pool's void marks of
// claims that were anchored but never stored, and it prunes the entries that expired. Creating an object is atomic across every webhook replica, which is what makes a token, a
// Pod or a claim single-use. It also reads the anchors back for `agent-sandbox audit verify
// --against-cluster` (ListAnchors), with the auditor's own credentials.
//
// Trust role: in the cluster, trusted: the webhook's storage. It decides nothing; the decisions that
// consume it (package webhook) declare the interfaces it satisfies, and it never imports them, so the
// auditor's side reads anchors without the decision package.
package ledger

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/contract"
)

// annotationLedgerExpires records when a ledger entry's token expired, so the entry can be pruned after.
const annotationLedgerExpires = "agent-sandbox.dev/expires"

var (
	tokenIDRE = regexp.MustCompile(`^[0-9a-f]{16,64}$`)
	uidRE     = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
)

// ErrSecondPod means a Job already had its Pod: RecordPod found the Job's entry.
var ErrSecondPod = errors.New("this Job already had its Pod")

// ErrClaimReplayed means a claim with this request ID was admitted before: RecordClaim found its entry.
var ErrClaimReplayed = errors.New("a claim with this request ID was admitted before")

// ConfigMapLedger records used approval token IDs, the Jobs that have had their Pod, the request IDs of
// warm-Pod claims and the calls' audit anchors in the API server, one immutable ConfigMap per entry
// (approval-<token ID>, pod-<Job UID>, claim-<request ID>, anchor-<request ID>-<Job hash>). Creating an
// object is atomic across every webhook replica: the API server lets exactly one create of a name succeed,
// so AlreadyExists means the token was used, or the Job had its Pod, before.
type ConfigMapLedger struct {
	Client    client.Client
	Namespace string
	Now       func() time.Time
}

var _ approval.Ledger = (*ConfigMapLedger)(nil)

// Record stores tokenID, or returns approval.ErrReplayed if it is already there.
func (l *ConfigMapLedger) Record(ctx context.Context, tokenID string, expires time.Time) error {
	if !tokenIDRE.MatchString(tokenID) {
		return fmt.Errorf("token ID %q: %w", tokenID, approval.ErrMalformed)
	}
	err := l.create(ctx, "approval-"+tokenID, expires)
	switch {
	case apierrors.IsAlreadyExists(err):
		return approval.ErrReplayed
	case err != nil:
		return fmt.Errorf("record approval %s in the ledger: %w", tokenID, err)
	}
	return nil
}

// Seen reports whether tokenID was recorded. It lists by name rather than reading the entry, because the
// webhook may create, list and delete ledger entries but not get them; the list goes to the API server, never
// to a cache, so an entry it misses is one that Record is creating at that moment (and Record then refuses).
func (l *ConfigMapLedger) Seen(ctx context.Context, tokenID string) (bool, error) {
	if !tokenIDRE.MatchString(tokenID) {
		return false, fmt.Errorf("token ID %q: %w", tokenID, approval.ErrMalformed)
	}
	return l.exists(ctx, "approval-"+tokenID, "approval "+tokenID)
}

// exists reports whether the entry name is in the ledger, listing by name (the webhook may create, list and
// delete ledger entries but not get them) from the API server, never from a cache. what names the entry in
// an error.
func (l *ConfigMapLedger) exists(ctx context.Context, name, what string) (bool, error) {
	var list corev1.ConfigMapList
	if err := l.Client.List(ctx, &list, client.InNamespace(l.Namespace),
		client.MatchingFields{"metadata.name": name}, client.Limit(1)); err != nil {
		return false, fmt.Errorf("look up %s in the ledger: %w", what, err)
	}
	return len(list.Items) > 0, nil
}

// RecordPod stores that the Job with UID job has had its Pod, or returns ErrSecondPod.
func (l *ConfigMapLedger) RecordPod(ctx context.Context, job types.UID, expires time.Time) error {
	if !uidRE.MatchString(string(job)) {
		return fmt.Errorf("job UID %q is not a UID", job)
	}
	err := l.create(ctx, "pod-"+string(job), expires)
	switch {
	case apierrors.IsAlreadyExists(err):
		return ErrSecondPod
	case err != nil:
		return fmt.Errorf("record the Pod of Job %s in the ledger: %w", job, err)
	}
	return nil
}

// PodRecorded reports whether RecordPod stored job: whether the webhook admitted a Pod of that Job. Like
// Seen, it lists by name (the webhook may not get ledger entries) and asks the API server, never a cache.
func (l *ConfigMapLedger) PodRecorded(ctx context.Context, job types.UID) (bool, error) {
	if !uidRE.MatchString(string(job)) {
		return false, fmt.Errorf("job UID %q is not a UID", job)
	}
	return l.exists(ctx, "pod-"+string(job), "the Pod of Job "+string(job))
}

// RecordJob stores that the webhook admitted the Job with UID job. A second call for the same UID succeeds:
// the UID is the API server's, and only a Job that was admitted has one to record.
func (l *ConfigMapLedger) RecordJob(ctx context.Context, job types.UID, expires time.Time) error {
	if !uidRE.MatchString(string(job)) {
		return fmt.Errorf("job UID %q is not a UID", job)
	}
	if err := l.create(ctx, "job-"+string(job), expires); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("record the admission of Job %s in the ledger: %w", job, err)
	}
	return nil
}

// JobRecorded reports whether RecordJob stored job: whether the webhook admitted that Job. Like Seen, it
// lists by name and asks the API server, never a cache.
func (l *ConfigMapLedger) JobRecorded(ctx context.Context, job types.UID) (bool, error) {
	if !uidRE.MatchString(string(job)) {
		return false, fmt.Errorf("job UID %q is not a UID", job)
	}
	return l.exists(ctx, "job-"+string(job), "the admission of Job "+string(job))
}

// RecordClaim stores the request ID of an admitted claim, or returns ErrClaimReplayed.
func (l *ConfigMapLedger) RecordClaim(ctx context.Context, requestID string, expires time.Time) error {
	if !approval.ValidRequestID(requestID) {
		return fmt.Errorf("request ID %q is not a request ID", requestID)
	}
	err := l.create(ctx, "claim-"+requestID, expires)
	switch {
	case apierrors.IsAlreadyExists(err):
		return ErrClaimReplayed
	case err != nil:
		return fmt.Errorf("record claim %s in the ledger: %w", requestID, err)
	}
	return nil
}

func (l *ConfigMapLedger) create(ctx context.Context, name string, expires time.Time) error {
	return l.createEntry(ctx, name, nil, map[string]string{"usedAt": l.now().UTC().Format(time.RFC3339Nano)}, expires)
}

// createEntry creates one immutable ledger entry, labelled as one (so Prune deletes it after expires) and
// with the extra labels given.
func (l *ConfigMapLedger) createEntry(ctx context.Context, name string, labels, data map[string]string, expires time.Time) error {
	all := map[string]string{contract.LabelApprovalLedger: "true"}
	for k, v := range labels {
		all[k] = v
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Namespace:   l.Namespace,
			Labels:      all,
			Annotations: map[string]string{annotationLedgerExpires: expires.UTC().Format(time.RFC3339)},
		},
		Data:      data,
		Immutable: ptr.To(true),
	}
	return l.Client.Create(ctx, cm)
}

// Prune deletes entries whose tokens expired more than the allowed clock skew ago: such a token is refused
// as expired anyway, so its entry is no longer needed to refuse a replay. Audit anchors expire after the
// retention the webhook recorded them with (webhook.Checker.AnchorRetention).
func (l *ConfigMapLedger) Prune(ctx context.Context) (int, error) {
	var list corev1.ConfigMapList
	if err := l.Client.List(ctx, &list, client.InNamespace(l.Namespace), client.MatchingLabels{contract.LabelApprovalLedger: "true"}); err != nil {
		return 0, fmt.Errorf("list approval ledger: %w", err)
	}
	cutoff := l.now().Add(-2 * approval.ClockSkew)
	n := 0
	for i := range list.Items {
		cm := &list.Items[i]
		exp, err := time.Parse(time.RFC3339, cm.Annotations[annotationLedgerExpires])
		if err != nil || exp.After(cutoff) {
			continue
		}
		if err := l.Client.Delete(ctx, cm); err != nil && !apierrors.IsNotFound(err) {
			return n, fmt.Errorf("prune approval ledger entry %s: %w", cm.Name, err)
		}
		n++
	}
	return n, nil
}

func (l *ConfigMapLedger) now() time.Time {
	if l.Now != nil {
		return l.Now()
	}
	return time.Now()
}
