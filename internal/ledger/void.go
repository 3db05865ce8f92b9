package ledger

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/audit"
	"github.com/agent-sandbox/agent-sandbox/internal/contract"
)

// The warm pool's void marks (audit.Void; docs/design/audit-anchors.md, "A claim admitted but never
// stored"): an immutable ConfigMap beside the anchor it voids, in the webhook's namespace, which only the
// webhook's identity (and the cluster's admins) may create — the identity that may also delete the anchors
// themselves, so a mark gives no one a way to hide a call that they did not have. The MCP server has no
// access to that namespace at all.

// Keys of a void mark's ConfigMap.
const (
	voidKeyAnchor             = "anchor"
	voidKeyRequestID          = "requestID"
	voidKeyJob                = "job"
	voidKeyHead               = "head"
	voidKeyPodUID             = "podUID"
	voidKeyPodResourceVersion = "podResourceVersion"
	voidKeyEvidence           = "evidence"
	voidKeyClaimedBy          = "claimedBy"
	voidKeyObserved           = "observedResourceVersion"
	voidKeyVoided             = "voided"
)

// voidPrefix begins the name of the void mark of an anchor: void-anchor-<request ID>-<Job hash>.
const voidPrefix = "void-"

// VoidName is the name of the void mark of the anchor named anchor.
func VoidName(anchor string) string { return voidPrefix + anchor }

// ClaimAnchor is an anchor as the ledger holds it: with its void mark, if any, and when it expires.
type ClaimAnchor struct {
	audit.Anchor
	// Expires is when Prune deletes the anchor (its retention); the zero time if the entry does not say.
	Expires time.Time
}

// ClaimAnchors reads the anchors of the warm claims admitted on the Pods with these UIDs, each with its
// void mark if it has one, from the API server (never a cache): one list of the anchors and marks labelled
// contract.LabelClaimedPod with one of the UIDs.
func (l *ConfigMapLedger) ClaimAnchors(ctx context.Context, pods []types.UID) ([]ClaimAnchor, error) {
	if len(pods) == 0 {
		return nil, nil
	}
	uids := make([]string, 0, len(pods))
	for _, u := range pods {
		if !uidRE.MatchString(string(u)) {
			return nil, fmt.Errorf("Pod UID %q is not a UID", u)
		}
		uids = append(uids, string(u))
	}
	byPod, err := labels.NewRequirement(contract.LabelClaimedPod, selection.In, uids)
	if err != nil {
		return nil, err
	}
	sel := func(kind string) client.ListOption {
		is, _ := labels.NewRequirement(kind, selection.Equals, []string{"true"})
		return client.MatchingLabelsSelector{Selector: labels.NewSelector().Add(*is, *byPod)}
	}
	anchors, voids, err := listLedger(ctx, l.Client, l.Namespace, sel(contract.LabelAuditAnchor), sel(contract.LabelAuditAnchorVoid))
	if err != nil {
		return nil, err
	}
	for i := range anchors {
		anchors[i].Void = voids[anchors[i].Name]
	}
	return anchors, nil
}

// RecordVoid stores v as the immutable ConfigMap VoidName(v.Anchor), labelled
// contract.LabelAuditAnchorVoid and contract.LabelClaimedPod and pruned with its anchor once expires has
// passed. A mark that already exists is left as it is: the claim was voided before.
func (l *ConfigMapLedger) RecordVoid(ctx context.Context, v audit.Void, expires time.Time) error {
	if err := validVoid(v); err != nil {
		return err
	}
	name := VoidName(v.Anchor)
	data := map[string]string{
		voidKeyAnchor:             v.Anchor,
		voidKeyRequestID:          v.RequestID,
		voidKeyJob:                v.Job,
		voidKeyHead:               v.Head,
		voidKeyPodUID:             v.PodUID,
		voidKeyPodResourceVersion: v.PodResourceVersion,
		voidKeyEvidence:           string(v.Evidence),
		voidKeyVoided:             v.Voided.UTC().Format(time.RFC3339Nano),
	}
	if v.ClaimedBy != "" {
		data[voidKeyClaimedBy] = v.ClaimedBy
	}
	if v.ObservedResourceVersion != "" {
		data[voidKeyObserved] = v.ObservedResourceVersion
	}
	lbl := map[string]string{contract.LabelAuditAnchorVoid: "true", contract.LabelClaimedPod: v.PodUID}
	err := l.createEntry(ctx, name, lbl, data, expires)
	switch {
	case apierrors.IsAlreadyExists(err):
		return nil
	case err != nil:
		return fmt.Errorf("record void mark %s: %w", name, err)
	}
	return nil
}

// VoidFromConfigMap decodes a void mark that RecordVoid stored.
func VoidFromConfigMap(cm *corev1.ConfigMap) (audit.Void, error) {
	d := cm.Data
	v := audit.Void{Name: cm.Name, Anchor: d[voidKeyAnchor], RequestID: d[voidKeyRequestID], Job: d[voidKeyJob], Head: d[voidKeyHead],
		PodUID: d[voidKeyPodUID], PodResourceVersion: d[voidKeyPodResourceVersion], Evidence: audit.VoidEvidence(d[voidKeyEvidence]),
		ClaimedBy: d[voidKeyClaimedBy], ObservedResourceVersion: d[voidKeyObserved]}
	var err error
	if v.Voided, err = time.Parse(time.RFC3339Nano, d[voidKeyVoided]); err != nil {
		return v, fmt.Errorf("void mark %s: time: %w", cm.Name, err)
	}
	if err := validVoid(v); err != nil {
		return v, fmt.Errorf("void mark %s: %w", cm.Name, err)
	}
	if cm.Name != VoidName(v.Anchor) || cm.Labels[contract.LabelClaimedPod] != v.PodUID {
		return v, fmt.Errorf("void mark %s: the name or label does not match the anchor and Pod it voids", cm.Name)
	}
	return v, nil
}

// validVoid checks the fields of a mark; whether its evidence proves anything is audit.Void.Refutes's.
func validVoid(v audit.Void) error {
	switch {
	case !approval.ValidRequestID(v.RequestID) || v.Anchor != AnchorName(v.RequestID, v.Job):
		return fmt.Errorf("it voids anchor %q, which is not the anchor of request %q and Job %q", v.Anchor, v.RequestID, v.Job)
	case !audit.ValidHead(v.Head):
		return fmt.Errorf("head %q is not 64 lowercase hex digits", v.Head)
	case !uidRE.MatchString(v.PodUID) || v.PodResourceVersion == "":
		return fmt.Errorf("claimed Pod UID %q, resourceVersion %q", v.PodUID, v.PodResourceVersion)
	case v.ClaimedBy != "" && !approval.ValidRequestID(v.ClaimedBy):
		return fmt.Errorf("claimed by %q, which is not a request ID", v.ClaimedBy)
	case strings.TrimSpace(string(v.Evidence)) == "":
		return fmt.Errorf("no evidence")
	}
	return nil
}
