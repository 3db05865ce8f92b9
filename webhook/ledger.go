package webhook

import (
	"context"
	"fmt"
	"regexp"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/contract"
)

// annotationLedgerExpires records when a ledger entry's token expired, so the entry can be pruned after.
const annotationLedgerExpires = "agent-sandbox.dev/expires"

var tokenIDRE = regexp.MustCompile(`^[0-9a-f]{16,64}$`)

// ConfigMapLedger records used approval token IDs in the API server, one ConfigMap per ID. Creating an
// object is atomic across every webhook replica: the API server lets exactly one create of a name succeed,
// so AlreadyExists means the token was used before.
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
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:        "approval-" + tokenID,
			Namespace:   l.Namespace,
			Labels:      map[string]string{contract.LabelApprovalLedger: "true"},
			Annotations: map[string]string{annotationLedgerExpires: expires.UTC().Format(time.RFC3339)},
		},
		Data: map[string]string{"usedAt": l.now().UTC().Format(time.RFC3339Nano)},
	}
	err := l.Client.Create(ctx, cm)
	switch {
	case apierrors.IsAlreadyExists(err):
		return approval.ErrReplayed
	case err != nil:
		return fmt.Errorf("record approval %s in the ledger: %w", tokenID, err)
	}
	return nil
}

// Prune deletes entries whose tokens expired more than the allowed clock skew ago: such a token is refused
// as expired anyway, so its entry is no longer needed to refuse a replay.
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
