package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/oneline"
)

// LabelWorkspace marks the ConfigMaps that carry a Terraform workspace's files into sandboxes.
const LabelWorkspace = "agent-sandbox.dev/workspace"

// PlanKey is the binaryData key of a saved plan's ConfigMap (named contract.PlanConfigMapPrefix and the
// plan ID).
const PlanKey = "tfplan"

// WorkspaceConfigMapName is "tfws-" and 20 hex characters of the SHA-256 over the sorted files: the same
// files always give the same name.
func WorkspaceConfigMapName(files map[string]string) string {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		fmt.Fprintf(h, "%d:%s%d:%s", len(n), n, len(files[n]), files[n])
	}
	return contract.WorkspaceConfigMapPrefix + hex.EncodeToString(h.Sum(nil))[:20]
}

// Workspaces publishes workspace files as immutable ConfigMaps in the sandbox namespace.
type Workspaces struct {
	Client    kubernetes.Interface
	Namespace string
}

// EnsureWorkspace creates the ConfigMap, or accepts an existing one of that name: names are
// content-addressed, so the same name means the same files. created reports whether this call created it.
func (w *Workspaces) EnsureWorkspace(ctx context.Context, name string, files map[string]string) (created bool, _ error) {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.Namespace, Labels: map[string]string{LabelWorkspace: "true"}},
		Data:       files,
		Immutable:  ptr.To(true),
	}
	err := RetryOnQuotaConflict(ctx, func() error {
		_, err := w.Client.CoreV1().ConfigMaps(w.Namespace).Create(ctx, cm, metav1.CreateOptions{})
		return err
	})
	switch {
	case apierrors.IsAlreadyExists(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("create ConfigMap %s: %w", name, classifyCreate("", err))
	}
	return true, nil
}

// DeleteWorkspace deletes a workspace ConfigMap (a tfws- name only). One that is gone already is not an
// error. The chart's Role for the MCP server grants no delete on ConfigMaps (the webhook's pruner removes
// them when they expire): there the API server refuses it, and the caller leaves it to the pruner.
func (w *Workspaces) DeleteWorkspace(ctx context.Context, name string) error {
	if !strings.HasPrefix(name, contract.WorkspaceConfigMapPrefix) {
		return fmt.Errorf("%s is not a workspace ConfigMap", name)
	}
	err := w.Client.CoreV1().ConfigMaps(w.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete ConfigMap %s: %s", name, oneline.Fold(err.Error()))
	}
	return nil
}

// EnsurePlan stores a saved plan as the immutable ConfigMap tfplan-<plan ID>, or accepts the existing one:
// the name is the content's SHA-256.
func (w *Workspaces) EnsurePlan(ctx context.Context, planID string, plan []byte) error {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: contract.PlanConfigMapPrefix + planID, Namespace: w.Namespace},
		BinaryData: map[string][]byte{PlanKey: plan},
		Immutable:  ptr.To(true),
	}
	err := RetryOnQuotaConflict(ctx, func() error {
		_, err := w.Client.CoreV1().ConfigMaps(w.Namespace).Create(ctx, cm, metav1.CreateOptions{})
		return err
	})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ConfigMap %s: %w", cm.Name, classifyCreate("", err))
	}
	return nil
}

// PlanExists checks that the saved plan's ConfigMap is there.
func (w *Workspaces) PlanExists(ctx context.Context, planID string) error {
	_, err := w.Client.CoreV1().ConfigMaps(w.Namespace).Get(ctx, contract.PlanConfigMapPrefix+planID, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("no saved plan %s: plan again with terraform_plan (saved plans expire with their approval requests)", planID[:min(12, len(planID))])
	case err != nil:
		return fmt.Errorf("%w: read saved plan %s: %s", ErrClusterDown, planID[:min(12, len(planID))], oneline.Fold(err.Error()))
	}
	return nil
}
