package ledger

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
)

// TestConfigMapLedgerSeen: Seen finds exactly the token IDs Record stored, records nothing itself, and
// refuses an ID that is not one. (The field selector it lists with is checked against a real API server, with
// the chart's RBAC, in test/integration.)
func TestConfigMapLedgerSeen(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).
		WithIndex(&corev1.ConfigMap{}, "metadata.name", func(o client.Object) []string { return []string{o.GetName()} }).Build()
	l := &ConfigMapLedger{Client: c, Namespace: "agent-sandbox-system"}
	ctx := context.Background()
	const a, b = "00112233445566778899aabbccddeeff", "ffeeddccbbaa99887766554433221100"
	for _, id := range []string{a, b} {
		if seen, err := l.Seen(ctx, id); err != nil || seen {
			t.Fatalf("Seen(%s) before any Record = %v, %v", id, seen, err)
		}
	}
	if err := l.Record(ctx, a, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if seen, err := l.Seen(ctx, a); err != nil || !seen {
		t.Errorf("Seen(recorded) = %v, %v; want true", seen, err)
	}
	if seen, err := l.Seen(ctx, b); err != nil || seen {
		t.Errorf("Seen(other) = %v, %v; want false", seen, err)
	}
	if err := l.Record(ctx, b, time.Now().Add(time.Hour)); err != nil {
		t.Errorf("Seen recorded what it looked up: %v", err)
	}
	if _, err := l.Seen(ctx, "../x"); !errors.Is(err, approval.ErrMalformed) {
		t.Errorf("Seen of a malformed ID: %v, want ErrMalformed", err)
	}
}

// TestConfigMapLedgerPodRecorded: PodRecorded finds exactly the Jobs RecordPod stored. (Against a real API
// server, with the chart's RBAC, in test/integration's TestWebhookTokenOnlyForAdmittedPods.)
func TestConfigMapLedgerPodRecorded(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).
		WithIndex(&corev1.ConfigMap{}, "metadata.name", func(o client.Object) []string { return []string{o.GetName()} }).Build()
	l := &ConfigMapLedger{Client: c, Namespace: "agent-sandbox-system"}
	ctx := context.Background()
	const a, b = types.UID("0f6b8a4e-1c2d-4e5f-8a9b-00000000000a"), types.UID("0f6b8a4e-1c2d-4e5f-8a9b-00000000000b")
	if err := l.RecordPod(ctx, a, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if ok, err := l.PodRecorded(ctx, a); err != nil || !ok {
		t.Errorf("PodRecorded(recorded) = %v, %v; want true", ok, err)
	}
	if ok, err := l.PodRecorded(ctx, b); err != nil || ok {
		t.Errorf("PodRecorded(other) = %v, %v; want false", ok, err)
	}
	if _, err := l.PodRecorded(ctx, "../x"); err == nil {
		t.Error("PodRecorded of a malformed UID succeeded")
	}
}

// TestConfigMapLedgerJobRecorded: JobRecorded finds exactly the Jobs RecordJob stored, and recording one
// twice is no error. (Against a real API server in test/integration's TestWebhookNoPodForAJobMadeInAGap.)
func TestConfigMapLedgerJobRecorded(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).
		WithIndex(&corev1.ConfigMap{}, "metadata.name", func(o client.Object) []string { return []string{o.GetName()} }).Build()
	l := &ConfigMapLedger{Client: c, Namespace: "agent-sandbox-system"}
	ctx := context.Background()
	const a, b = types.UID("0f6b8a4e-1c2d-4e5f-8a9b-00000000000a"), types.UID("0f6b8a4e-1c2d-4e5f-8a9b-00000000000b")
	for range 2 {
		if err := l.RecordJob(ctx, a, time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := l.JobRecorded(ctx, a); err != nil || !ok {
		t.Errorf("JobRecorded(recorded) = %v, %v; want true", ok, err)
	}
	if ok, err := l.JobRecorded(ctx, b); err != nil || ok {
		t.Errorf("JobRecorded(other) = %v, %v; want false", ok, err)
	}
	// A Job's admission and its Pod are two entries: one does not stand for the other.
	if ok, err := l.PodRecorded(ctx, a); err != nil || ok {
		t.Errorf("PodRecorded of a Job only admitted = %v, %v; want false", ok, err)
	}
	if err := l.RecordJob(ctx, "../x", time.Now()); err == nil {
		t.Error("RecordJob of a malformed UID succeeded")
	}
}
