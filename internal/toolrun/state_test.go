package toolrun

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

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
}

// TestStateStoreRoundTrip writes a state in the kubernetes backend's format and reads it back. The
// version checks and the RBAC by name are tested against a real API server (test/integration).
func TestStateStoreRoundTrip(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	s := &StateStore{Client: client, Namespace: "demo-app", Workspace: "k8s-demo"}
	st, err := s.Read(ctx)
	if err != nil || st.Data != nil || st.ResourceVersion != "" {
		t.Fatalf("empty workspace: %+v %v", st, err)
	}
	state := []byte(`{"version":4,"serial":1,"lineage":"x"}`)
	if err := s.Write(ctx, st, state); err != nil {
		t.Fatal(err)
	}
	sec, err := client.CoreV1().Secrets("demo-app").Get(ctx, "tfstate-default-k8s-demo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sec.Labels["tfstate"] != "true" || sec.Labels["tfstateSecretSuffix"] != "k8s-demo" || len(sec.Data["tfstate"]) == 0 {
		t.Errorf("not the kubernetes backend's format: %+v", sec)
	}
	if string(sec.Data["tfstate"]) == string(state) {
		t.Error("state not gzipped")
	}
	back, err := s.Read(ctx)
	if err != nil || string(back.Data) != string(state) {
		t.Fatalf("read back %q %v", back.Data, err)
	}
	// Creating again where one exists is refused: a write never replaces a state it did not read.
	if err := s.Write(ctx, State{}, state); err == nil {
		t.Error("a second create overwrote the state")
	}
}

func TestStateLock(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	s := &StateStore{Client: client, Namespace: "demo-app", Workspace: "k8s-demo", Now: func() time.Time { return now }}
	unlock, err := s.Lock(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Lock(ctx, 0); !errors.Is(err, ErrStateLocked) {
		t.Fatalf("second lock: %v", err)
	}
	if err := unlock(ctx); err != nil {
		t.Fatal(err)
	}
	unlock, err = s.Lock(ctx, 0)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	_ = unlock
	// A lock whose holder died expires.
	now = now.Add(stateLockDuration + time.Minute)
	if _, err := s.Lock(ctx, 0); err != nil {
		t.Fatalf("an expired lock was not taken over: %v", err)
	}
	l, _ := client.CoordinationV1().Leases("demo-app").Get(ctx, StateLockName("k8s-demo"), metav1.GetOptions{})
	if l == nil || l.Spec.AcquireTime == nil || !l.Spec.AcquireTime.Time.Equal(now) {
		t.Errorf("lease %+v", l)
	}
}
