package sandbox

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
)

func warmPod(name string, started time.Time) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning,
			ContainerStatuses: []corev1.ContainerStatus{{
				Name:  contract.ToolContainer,
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(started)}},
			}},
			InitContainerStatuses: []corev1.ContainerStatus{{
				Name:  contract.CredentialAgentContainer,
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(started)}},
			}},
		},
	}
}

// The settled Pods come first whatever the shuffle did, the fresh ones last, and every Pod stays a
// candidate.
func TestPreferSettled(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for range 50 {
		pods := []*corev1.Pod{
			warmPod("fresh-1", now.Add(-100*time.Millisecond)),
			warmPod("old-1", now.Add(-time.Minute)),
			warmPod("fresh-2", now.Add(-settleTime+time.Millisecond)),
			warmPod("old-2", now.Add(-settleTime)),
			warmPod("future", now.Add(time.Second)), // a node clock ahead of ours: fresh, still a candidate
		}
		preferSettled(pods, now)
		if len(pods) != 5 {
			t.Fatalf("got %d candidates, want 5", len(pods))
		}
		for i, p := range pods {
			old := p.Name == "old-1" || p.Name == "old-2"
			if (i < 2) != old {
				var names []string
				for _, p := range pods {
					names = append(names, p.Name)
				}
				t.Fatalf("order %v: the two settled Pods must come first", names)
			}
		}
	}
}

// Without settled Pods the order is a shuffle: over many runs each Pod leads at least once, so concurrent
// calls do not all race for the same Pod.
func TestPreferSettledSpreadsFreshPods(t *testing.T) {
	now := time.Now()
	first := map[string]bool{}
	for range 200 {
		pods := []*corev1.Pod{warmPod("a", now), warmPod("b", now), warmPod("c", now)}
		preferSettled(pods, now)
		first[pods[0].Name] = true
	}
	if len(first) != 3 {
		t.Fatalf("only %v ever came first", first)
	}
}

func TestClaimable(t *testing.T) {
	now := time.Now()
	if !Claimable(warmPod("p", now)) {
		t.Fatal("a running warm Pod with both containers started must be claimable")
	}
	claimed := warmPod("p", now)
	claimed.Annotations = map[string]string{contract.AnnotationClaim: "{}"}
	gone := warmPod("p", now)
	gone.DeletionTimestamp = &metav1.Time{Time: now}
	pending := warmPod("p", now)
	pending.Status.Phase = corev1.PodPending
	noAgent := warmPod("p", now)
	noAgent.Status.InitContainerStatuses = nil
	toolDone := warmPod("p", now)
	toolDone.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{}}
	for name, p := range map[string]*corev1.Pod{"claimed": claimed, "deleted": gone, "pending": pending, "agent not started": noAgent, "tool exited": toolDone} {
		if Claimable(p) {
			t.Errorf("%s: claimable, want not", name)
		}
	}
}
