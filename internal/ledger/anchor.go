package ledger

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/audit"
	"github.com/agent-sandbox/agent-sandbox/internal/contract"
)

// The storage of audit anchors (internal/audit, Anchor; docs/design/audit-anchors.md): the webhook records
// one per admitted call, and `agent-sandbox audit verify --against-cluster` lists them back.

// Keys of an anchor's ConfigMap.
const (
	anchorKeyRequestID = "requestID"
	anchorKeyHead      = "head"
	anchorKeyTool      = "tool"
	anchorKeyJob       = "job"
	anchorKeyUser      = "user"
	anchorKeyAdmitted  = "admitted"
	anchorKeyDeadline  = "deadline"
	// A warm claim's: the claimed Pod and the resourceVersion of it the claim was admitted against.
	anchorKeyPod                = "pod"
	anchorKeyPodUID             = "podUID"
	anchorKeyPodResourceVersion = "podResourceVersion"
)

// AnchorName is the name of the anchor of request requestID served by Job job: unique per admission,
// since one request may be admitted twice (a warm claim, then a cold Job when the warm Pod could not
// serve it), each time with another Job.
func AnchorName(requestID, job string) string {
	sum := sha256.Sum256([]byte(job))
	return "anchor-" + requestID + "-" + hex.EncodeToString(sum[:])[:10]
}

// RecordAnchor stores a as the immutable ConfigMap AnchorName(a.RequestID, a.Job), labelled
// contract.LabelAuditAnchor (and, for a warm claim, contract.LabelClaimedPod) and pruned with the other
// ledger entries once expires has passed. An anchor that already exists is left as it is: the same call's
// Job was admitted before, and its create did not persist; the first head stands (it precedes the call's
// sandbox too).
func (l *ConfigMapLedger) RecordAnchor(ctx context.Context, a audit.Anchor, expires time.Time) error {
	if !approval.ValidRequestID(a.RequestID) {
		return fmt.Errorf("request ID %q is not a request ID", a.RequestID)
	}
	if !audit.ValidHead(a.Head) {
		return fmt.Errorf("audit head %q is not 64 lowercase hex digits", a.Head)
	}
	if err := validClaimedPod(a); err != nil {
		return err
	}
	name := AnchorName(a.RequestID, a.Job)
	data := map[string]string{
		anchorKeyRequestID: a.RequestID,
		anchorKeyHead:      a.Head,
		anchorKeyTool:      a.Tool,
		anchorKeyJob:       a.Job,
		anchorKeyUser:      a.User,
		anchorKeyAdmitted:  a.Admitted.UTC().Format(time.RFC3339Nano),
		anchorKeyDeadline:  a.Deadline.String(),
	}
	labels := map[string]string{contract.LabelAuditAnchor: "true"}
	if a.PodUID != "" {
		data[anchorKeyPod], data[anchorKeyPodUID], data[anchorKeyPodResourceVersion] = a.Pod, a.PodUID, a.PodResourceVersion
		labels[contract.LabelClaimedPod] = a.PodUID
	}
	err := l.createEntry(ctx, name, labels, data, expires)
	switch {
	case apierrors.IsAlreadyExists(err):
		return nil
	case err != nil:
		return fmt.Errorf("record audit anchor %s: %w", name, err)
	}
	return nil
}

// AnchorFromConfigMap decodes an anchor that RecordAnchor stored.
func AnchorFromConfigMap(cm *corev1.ConfigMap) (audit.Anchor, error) {
	d := cm.Data
	a := audit.Anchor{Name: cm.Name, RequestID: d[anchorKeyRequestID], Head: d[anchorKeyHead], Tool: d[anchorKeyTool], Job: d[anchorKeyJob], User: d[anchorKeyUser],
		Pod: d[anchorKeyPod], PodUID: d[anchorKeyPodUID], PodResourceVersion: d[anchorKeyPodResourceVersion]}
	var err error
	if a.Admitted, err = time.Parse(time.RFC3339Nano, d[anchorKeyAdmitted]); err != nil {
		return a, fmt.Errorf("anchor %s: admission time: %w", cm.Name, err)
	}
	if a.Deadline, err = time.ParseDuration(d[anchorKeyDeadline]); err != nil {
		return a, fmt.Errorf("anchor %s: deadline: %w", cm.Name, err)
	}
	switch {
	case !approval.ValidRequestID(a.RequestID):
		return a, fmt.Errorf("anchor %s: request ID %q is not a request ID", cm.Name, a.RequestID)
	case !audit.ValidHead(a.Head):
		return a, fmt.Errorf("anchor %s: head %q is not 64 lowercase hex digits", cm.Name, a.Head)
	case cm.Name != AnchorName(a.RequestID, a.Job):
		return a, fmt.Errorf("anchor %s: the name does not match its request ID and Job", cm.Name)
	}
	if err := validClaimedPod(a); err != nil {
		return a, fmt.Errorf("anchor %s: %w", cm.Name, err)
	}
	if a.PodUID != "" && cm.Labels[contract.LabelClaimedPod] != a.PodUID {
		return a, fmt.Errorf("anchor %s: its label %s does not name its claimed Pod", cm.Name, contract.LabelClaimedPod)
	}
	return a, nil
}

// validClaimedPod checks the claimed Pod of a warm claim's anchor: none, or a Pod with its UID and the
// resourceVersion the claim was admitted against.
func validClaimedPod(a audit.Anchor) error {
	switch {
	case a.Pod == "" && a.PodUID == "" && a.PodResourceVersion == "":
		return nil
	case a.Pod == "" || !uidRE.MatchString(a.PodUID) || a.PodResourceVersion == "":
		return fmt.Errorf("claimed Pod %q (UID %q, resourceVersion %q) is not a Pod's name, UID and resourceVersion", a.Pod, a.PodUID, a.PodResourceVersion)
	}
	return nil
}

// anchorPageSize is how many anchors ListAnchors asks the API server for at a time.
const anchorPageSize = 500

// ListAnchors reads every audit anchor in namespace, a page at a time, each with the warm pool's void mark
// if it has one. A mark that names no anchor in namespace is left out: what it would void is not there.
func ListAnchors(ctx context.Context, c client.Reader, namespace string) ([]audit.Anchor, error) {
	anchors, voids, err := listLedger(ctx, c, namespace, client.MatchingLabels{contract.LabelAuditAnchor: "true"}, client.MatchingLabels{contract.LabelAuditAnchorVoid: "true"})
	if err != nil {
		return nil, err
	}
	out := make([]audit.Anchor, 0, len(anchors))
	for _, a := range anchors {
		a.Anchor.Void = voids[a.Name]
		out = append(out, a.Anchor)
	}
	return out, nil
}

// listLedger reads the anchors matching anchorSel and the void marks matching voidSel in namespace, a page
// at a time; the marks by the name of the anchor they void.
func listLedger(ctx context.Context, c client.Reader, namespace string, anchorSel, voidSel client.ListOption) ([]ClaimAnchor, map[string]*audit.Void, error) {
	var anchors []ClaimAnchor
	err := listPages(ctx, c, namespace, anchorSel, func(cm *corev1.ConfigMap) error {
		a, err := AnchorFromConfigMap(cm)
		if err != nil {
			return err
		}
		exp, _ := time.Parse(time.RFC3339, cm.Annotations[annotationLedgerExpires])
		anchors = append(anchors, ClaimAnchor{Anchor: a, Expires: exp})
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("list audit anchors in %s: %w", namespace, err)
	}
	voids := map[string]*audit.Void{}
	err = listPages(ctx, c, namespace, voidSel, func(cm *corev1.ConfigMap) error {
		v, err := VoidFromConfigMap(cm)
		if err != nil {
			return err
		}
		voids[v.Anchor] = &v
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("list audit anchors' void marks in %s: %w", namespace, err)
	}
	return anchors, voids, nil
}

// listPages lists the ConfigMaps of namespace that sel selects, anchorPageSize at a time, handing each to
// visit.
func listPages(ctx context.Context, c client.Reader, namespace string, sel client.ListOption, visit func(*corev1.ConfigMap) error) error {
	cont := ""
	for {
		var list corev1.ConfigMapList
		opts := []client.ListOption{client.InNamespace(namespace), sel, client.Limit(anchorPageSize)}
		if cont != "" {
			opts = append(opts, client.Continue(cont))
		}
		if err := c.List(ctx, &list, opts...); err != nil {
			return err
		}
		for i := range list.Items {
			if err := visit(&list.Items[i]); err != nil {
				return err
			}
		}
		if cont = list.Continue; cont == "" {
			return nil
		}
	}
}
