package runner

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The saved-plan Secret: tfplan-<first PlanIDPrefixLength hex digits of the plan ID>, in the target
// namespace, with the plan file unchanged under PlanSecretKey.
const (
	PlanSecretPrefix   = "tfplan-"
	PlanSecretKey      = "plan.tfplan"
	PlanIDPrefixLength = 16
	// LabelPlanID holds the plan ID's prefix (a label value is at most 63 characters).
	LabelPlanID = "agent-sandbox.dev/plan-id"
	// LabelWorkspace holds the workspace the plan was made for; apply refuses a plan of another workspace.
	LabelWorkspace = "agent-sandbox.dev/workspace"
	// AnnotationPlanID holds the full plan ID.
	AnnotationPlanID = "agent-sandbox.dev/plan-id"
	labelManagedBy   = "app.kubernetes.io/managed-by"
	managedBy        = "agent-sandbox"
)

// maxPlanSize keeps the plan within what a Secret can hold (1 MiB, less the metadata).
const maxPlanSize = 1<<20 - 16<<10

var planIDRE = regexp.MustCompile(`^[a-f0-9]{64}$`)

var (
	// ErrPlanMismatch means the saved plan's bytes do not hash to the plan ID the apply was approved for.
	ErrPlanMismatch = errors.New("saved plan does not match the approved plan id")
	// ErrPlanNotFound means no saved plan exists for the plan ID (never made, or already applied).
	ErrPlanNotFound = errors.New("no saved plan with this plan id (never planned, or already applied)")
	// ErrPlanWorkspace means the saved plan was made for another workspace.
	ErrPlanWorkspace = errors.New("saved plan belongs to another workspace")
)

// PlanID is the lowercase hex SHA-256 of a saved plan file.
func PlanID(plan []byte) string {
	sum := sha256.Sum256(plan)
	return hex.EncodeToString(sum[:])
}

// ValidatePlanID checks that id is 64 lowercase hex digits.
func ValidatePlanID(id string) error {
	if !planIDRE.MatchString(id) {
		return fmt.Errorf("plan id %q: want 64 lowercase hex digits (a SHA-256)", id)
	}
	return nil
}

// PlanSecretName is the name of the Secret that holds the plan with this ID.
func PlanSecretName(planID string) string {
	return PlanSecretPrefix + planID[:PlanIDPrefixLength]
}

// SavePlan stores a plan file in a Secret and returns its plan ID. Saving the same plan twice is fine;
// a different plan under the same name (a prefix collision, or tampering) is an error.
func SavePlan(ctx context.Context, client kubernetes.Interface, namespace, workspace string, plan []byte) (string, error) {
	if len(plan) > maxPlanSize {
		return "", fmt.Errorf("save plan: the plan file is %d bytes, more than a Secret holds", len(plan))
	}
	id := PlanID(plan)
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      PlanSecretName(id),
			Namespace: namespace,
			Labels: map[string]string{
				LabelPlanID:    id[:PlanIDPrefixLength],
				LabelWorkspace: workspace,
				labelManagedBy: managedBy,
			},
			Annotations: map[string]string{AnnotationPlanID: id},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{PlanSecretKey: plan},
	}
	_, err := client.CoreV1().Secrets(namespace).Create(ctx, s, metav1.CreateOptions{})
	if err == nil {
		return id, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("save plan %s: %w", s.Name, err)
	}
	old, err := client.CoreV1().Secrets(namespace).Get(ctx, s.Name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("save plan %s: %w", s.Name, err)
	}
	if !bytes.Equal(old.Data[PlanSecretKey], plan) || old.Labels[LabelWorkspace] != workspace {
		return "", fmt.Errorf("save plan: Secret %s already holds a different plan", s.Name)
	}
	return id, nil
}

// LoadPlan reads the plan with this ID and checks that its bytes hash to exactly planID and that it was
// made for workspace.
func LoadPlan(ctx context.Context, client kubernetes.Interface, namespace, workspace, planID string) ([]byte, error) {
	if err := ValidatePlanID(planID); err != nil {
		return nil, err
	}
	name := PlanSecretName(planID)
	s, err := client.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%w: Secret %s/%s", ErrPlanNotFound, namespace, name)
	}
	if err != nil {
		return nil, fmt.Errorf("load plan %s: %w", name, err)
	}
	plan := s.Data[PlanSecretKey]
	if PlanID(plan) != planID {
		return nil, ErrPlanMismatch
	}
	if ws := s.Labels[LabelWorkspace]; ws != workspace {
		return nil, fmt.Errorf("%w: plan %s was made for workspace %q, not %q", ErrPlanWorkspace, planID[:PlanIDPrefixLength], ws, workspace)
	}
	return plan, nil
}

// DeletePlan removes the Secret of an applied plan: a plan is applied once. A Secret already gone is fine.
func DeletePlan(ctx context.Context, client kubernetes.Interface, namespace, planID string) error {
	name := PlanSecretName(planID)
	err := client.CoreV1().Secrets(namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete applied plan %s: %w", name, err)
	}
	return nil
}
