package runner

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestPlanID(t *testing.T) {
	// SHA-256 of the empty input.
	if got := PlanID(nil); got != "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" {
		t.Errorf("PlanID(nil) = %s", got)
	}
	if PlanID([]byte("a")) == PlanID([]byte("b")) {
		t.Error("two plans, one id")
	}
	if err := ValidatePlanID(PlanID([]byte("x"))); err != nil {
		t.Error(err)
	}
	for _, bad := range []string{"", "abc", strings.Repeat("A", 64), strings.Repeat("a", 63), strings.Repeat("a", 65), strings.Repeat("g", 64)} {
		if ValidatePlanID(bad) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if got := PlanSecretName(PlanID(nil)); got != "tfplan-e3b0c44298fc1c14" {
		t.Errorf("secret name %s", got)
	}
}

func TestPlanStore(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	plan := []byte("PK\x03\x04 a zip file")

	id, err := SavePlan(ctx, client, "demo-app", "k8s-demo", plan)
	if err != nil || id != PlanID(plan) {
		t.Fatalf("save: %s %v", id, err)
	}
	s, err := client.CoreV1().Secrets("demo-app").Get(ctx, PlanSecretName(id), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(s.Data[PlanSecretKey]) != string(plan) || s.Labels[LabelPlanID] != id[:16] ||
		s.Labels[LabelWorkspace] != "k8s-demo" || s.Annotations[AnnotationPlanID] != id || s.Type != corev1.SecretTypeOpaque {
		t.Errorf("secret %+v", s)
	}
	// Saving the same plan again is fine.
	if _, err := SavePlan(ctx, client, "demo-app", "k8s-demo", plan); err != nil {
		t.Errorf("save again: %v", err)
	}

	got, err := LoadPlan(ctx, client, "demo-app", "k8s-demo", id)
	if err != nil || string(got) != string(plan) {
		t.Fatalf("load: %q %v", got, err)
	}
	if _, err := LoadPlan(ctx, client, "demo-app", "other", id); !errors.Is(err, ErrPlanWorkspace) {
		t.Errorf("other workspace: %v", err)
	}
	wrong := id[:63] + "0"
	if wrong == id {
		wrong = id[:63] + "1"
	}
	if _, err := LoadPlan(ctx, client, "demo-app", "k8s-demo", wrong); !errors.Is(err, ErrPlanMismatch) || err.Error() != "saved plan does not match the approved plan id" {
		t.Errorf("wrong id: %v", err)
	}
	if _, err := LoadPlan(ctx, client, "demo-app", "k8s-demo", "nothex"); err == nil {
		t.Error("malformed id accepted")
	}

	// The stored bytes changed after planning: the hash no longer matches.
	s.Data[PlanSecretKey] = []byte("tampered")
	if _, err := client.CoreV1().Secrets("demo-app").Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadPlan(ctx, client, "demo-app", "k8s-demo", id); !errors.Is(err, ErrPlanMismatch) {
		t.Errorf("tampered: %v", err)
	}
	// And saving the real plan under that name now reports the conflict.
	if _, err := SavePlan(ctx, client, "demo-app", "k8s-demo", plan); err == nil || !strings.Contains(err.Error(), "different plan") {
		t.Errorf("save over a different plan: %v", err)
	}

	if err := DeletePlan(ctx, client, "demo-app", id); err != nil {
		t.Fatal(err)
	}
	if err := DeletePlan(ctx, client, "demo-app", id); err != nil {
		t.Errorf("delete twice: %v", err)
	}
	if _, err := LoadPlan(ctx, client, "demo-app", "k8s-demo", id); !errors.Is(err, ErrPlanNotFound) {
		t.Errorf("after delete: %v", err)
	}
	if _, err := SavePlan(ctx, client, "demo-app", "k8s-demo", make([]byte, maxPlanSize+1)); err == nil {
		t.Error("oversized plan saved")
	}
}
