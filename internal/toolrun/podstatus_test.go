package toolrun

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestListPodStatus(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	pod := func(name string, age time.Duration, labels map[string]string, mutate func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "demo-app", Labels: labels, CreationTimestamp: metav1.NewTime(now.Add(-age))},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "a"}, {Name: "b"}}},
			Status:     corev1.PodStatus{Phase: corev1.PodPending},
		}
		if mutate != nil {
			mutate(p)
		}
		return p
	}
	client := fake.NewClientset(
		pod("web-b", 3*time.Minute+12*time.Second, map[string]string{"app": "web"}, func(p *corev1.Pod) {
			p.Spec.NodeName = "node-1"
			p.Status.Phase = corev1.PodRunning
			p.Status.ContainerStatuses = []corev1.ContainerStatus{
				{Name: "a", Ready: true, RestartCount: 2},
				{Name: "b", RestartCount: 5, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}},
			}
		}),
		pod("web-a", 49*time.Hour, map[string]string{"app": "web"}, nil),
		pod("db", time.Second, map[string]string{"app": "db"}, nil),
		pod("web-future", -time.Minute, map[string]string{"app": "web"}, nil),
	)
	res, err := ListPodStatus(context.Background(), client, PodStatusOptions{Namespace: "demo-app", Selector: "app=web", Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Namespace != "demo-app" || res.Selector != "app=web" || len(res.Pods) != 3 {
		t.Fatalf("%+v", res)
	}
	want := []PodStatus{
		{Name: "web-a", Phase: "Pending", Ready: "0/2", Age: "2d1h", AgeSeconds: 49 * 3600},
		{Name: "web-b", Phase: "Running", Reason: "CrashLoopBackOff", Ready: "1/2", Restarts: 7, Age: "3m12s", AgeSeconds: 192, Node: "node-1"},
		{Name: "web-future", Phase: "Pending", Ready: "0/2", Age: "0s"},
	}
	for i := range want {
		if res.Pods[i] != want[i] {
			t.Errorf("pod %d:\n got %+v\nwant %+v", i, res.Pods[i], want[i])
		}
	}

	all, err := ListPodStatus(context.Background(), client, PodStatusOptions{Namespace: "demo-app"})
	if err != nil || len(all.Pods) != 4 || all.Pods[0].Name != "db" {
		t.Errorf("no selector: %+v %v", all, err)
	}
	empty, err := ListPodStatus(context.Background(), client, PodStatusOptions{Namespace: "other"})
	if err != nil || empty.Pods == nil || len(empty.Pods) != 0 {
		t.Errorf("empty namespace: %+v %v", empty, err)
	}
	if _, err := ListPodStatus(context.Background(), client, PodStatusOptions{Namespace: "demo-app", Selector: "app in (web"}); err == nil {
		t.Error("bad selector accepted")
	}
}

func TestSummarizePodReasons(t *testing.T) {
	now := time.Now()
	del := metav1.NewTime(now)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "x", DeletionTimestamp: &del},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "a"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
			{Name: "a", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled"}}},
		}},
	}
	if got := summarizePod(p, now); got.Reason != "Terminating" || got.Age != "0s" {
		t.Errorf("terminating: %+v", got)
	}
	p.DeletionTimestamp = nil
	if got := summarizePod(p, now); got.Reason != "OOMKilled" {
		t.Errorf("oom: %+v", got)
	}
	p.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}
	if got := summarizePod(p, now); got.Reason != "" {
		t.Errorf("creating: %+v", got)
	}
}
