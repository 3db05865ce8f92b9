package toolrun

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

var readNow = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func TestDescribeNeverResolvesSecrets(t *testing.T) {
	two := int32(2)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "demo-app", CreationTimestamp: metav1.NewTime(readNow.Add(-time.Hour))},
		Spec: appsv1.DeploymentSpec{Replicas: &two, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx", Env: []corev1.EnvVar{
				{Name: "MODE", Value: "prod"},
				{Name: "DB_PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}, Key: "pw"}}},
			}}}}}},
		Status: appsv1.DeploymentStatus{ReadyReplicas: 2, UpdatedReplicas: 2, AvailableReplicas: 2},
	}
	big := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg", Namespace: "demo-app"},
		Data: map[string]string{"a": strings.Repeat("x", MaxConfigValueBytes+10), "b": "short"}}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "demo-app"}, Data: map[string][]byte{"pw": []byte("hunter2")}}
	client := fake.NewClientset(d, big, secret)
	now := func() time.Time { return readNow }

	res, err := Describe(context.Background(), client, DescribeOptions{Namespace: "demo-app", Kind: KindDeployment, Name: "web", Now: now})
	if err != nil {
		t.Fatal(err)
	}
	w := res.Items[0].Workload
	if w == nil || w.Replicas != 2 || w.Selector != "app=web" || res.Items[0].Age.Age != "60m" {
		t.Fatalf("deployment: %+v age %+v", w, res.Items[0].Age)
	}
	env := strings.Join(w.Containers[0].Env, "|")
	if strings.Contains(env, "hunter2") || !strings.Contains(env, "DB_PASSWORD from secret db key pw") || !strings.Contains(env, "MODE=prod") {
		t.Errorf("env = %q", env)
	}

	res, err = Describe(context.Background(), client, DescribeOptions{Namespace: "demo-app", Kind: KindConfigMap, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	cm := res.Items[0].ConfigMap
	if len(res.Items) != 1 || !cm.Truncated || len(cm.Data["a"]) != MaxConfigValueBytes || cm.Data["b"] != "short" {
		t.Errorf("configmap: items %d truncated %v len(a) %d b %q", len(res.Items), cm.Truncated, len(cm.Data["a"]), cm.Data["b"])
	}
	if _, err := Describe(context.Background(), client, DescribeOptions{Namespace: "demo-app", Kind: "secret"}); err == nil {
		t.Error("describe of kind secret was accepted")
	}
}

func TestRolloutStatus(t *testing.T) {
	three := int32(3)
	mk := func(mut func(*appsv1.Deployment)) *appsv1.Deployment {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "demo-app", Generation: 2}, Spec: appsv1.DeploymentSpec{Replicas: &three},
			Status: appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 3, UpdatedReplicas: 3, ReadyReplicas: 3, AvailableReplicas: 3}}
		mut(d)
		return d
	}
	for _, tc := range []struct {
		name string
		d    *appsv1.Deployment
		want string
	}{
		{"complete", mk(func(*appsv1.Deployment) {}), RolloutComplete},
		{"unobserved", mk(func(d *appsv1.Deployment) { d.Status.ObservedGeneration = 1 }), RolloutProgressing},
		{"updating", mk(func(d *appsv1.Deployment) { d.Status.UpdatedReplicas = 1 }), RolloutProgressing},
		{"paused", mk(func(d *appsv1.Deployment) { d.Spec.Paused = true }), RolloutPaused},
		{"deadline", mk(func(d *appsv1.Deployment) {
			d.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded"}}
		}), RolloutFailed},
	} {
		res, err := RolloutStatus(context.Background(), fake.NewClientset(tc.d), RolloutOptions{Namespace: "demo-app", Kind: KindDeployment, Name: "web"})
		if err != nil || res.Status != tc.want {
			t.Errorf("%s: status %q (%s), err %v; want %q", tc.name, res.Status, res.Message, err, tc.want)
		}
	}
}

func TestListEventsNewestFirstAndBounded(t *testing.T) {
	ev := func(name, typ string, ago time.Duration) *corev1.Event {
		return &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "demo-app"}, Type: typ, Reason: "R", Message: name,
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "web-1"}, LastTimestamp: metav1.NewTime(readNow.Add(-ago))}
	}
	client := fake.NewClientset(ev("old", "Normal", time.Hour), ev("new", "Warning", time.Minute), ev("mid", "Normal", 10*time.Minute))
	res, err := ListEvents(context.Background(), client, EventsOptions{Namespace: "demo-app", Limit: 2, Now: func() time.Time { return readNow }})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Events) != 2 || res.Events[0].Message != "new" || res.Events[1].Message != "mid" || res.Total != 3 || !res.Truncated {
		t.Errorf("events = %+v total %d truncated %v", res.Events, res.Total, res.Truncated)
	}
	if err := (&EventsOptions{Namespace: "demo-app", Limit: MaxEvents + 1}).Validate(); err == nil {
		t.Error("a limit beyond MaxEvents was accepted")
	}
}

func TestTailLinesKeepsTheNewestAndScrubs(t *testing.T) {
	raw := []byte("first\npassword=hunter2hunter2\n" + strings.Repeat("y", MaxLogLineBytes+5) + "\nlast\n")
	lines, truncated := tailLines(raw, nil)
	if len(lines) != 4 || lines[0] != "first" || lines[3] != "last" || !truncated || len(lines[2]) != MaxLogLineBytes {
		t.Fatalf("lines %d truncated %v", len(lines), truncated)
	}
	if strings.Contains(lines[1], "hunter2") {
		t.Errorf("a secret survived: %q", lines[1])
	}
	many := []byte(strings.Repeat(strings.Repeat("z", 1000)+"\n", 200) + "newest\n")
	lines, truncated = tailLines(many, nil)
	if !truncated || lines[len(lines)-1] != "newest" {
		t.Errorf("the newest line was not kept within the bound")
	}
	total := 0
	for _, l := range lines {
		total += len(l) + 1
	}
	if total > MaxLogBytes {
		t.Errorf("%d bytes returned, bound %d", total, MaxLogBytes)
	}
}

func TestPodLogsPicksTheOnlyContainer(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "demo-app"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web"}}}}
	res, err := PodLogs(context.Background(), fake.NewClientset(pod), PodLogsOptions{Namespace: "demo-app", Pod: "web-1", TailLines: 10})
	if err != nil {
		t.Fatal(err)
	}
	if res.Container != "web" || len(res.Lines) == 0 {
		t.Errorf("result %+v", res)
	}
	if _, err := PodLogs(context.Background(), fake.NewClientset(pod), PodLogsOptions{Namespace: "demo-app", Pod: "web-1", Container: "db", TailLines: 10}); err == nil {
		t.Error("a container the pod does not have was accepted")
	}
	if err := (&PodLogsOptions{Namespace: "demo-app", Pod: "web-1", TailLines: MaxTailLines + 1}).Validate(); err == nil {
		t.Error("tail beyond MaxTailLines accepted")
	}
}
