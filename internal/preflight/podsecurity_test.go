package preflight

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/agent-sandbox/agent-sandbox/internal/podsecurity"
)

func labelled(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

// TestPodSecurityCheck: a target namespace enforcing no level fails the check, naming it, its label and the
// command that fixes it, and saying only the label is read; the allow flag makes that a warning; a
// namespace that does not exist yet is a warning; baseline and restricted pass.
func TestPodSecurityCheck(t *testing.T) {
	baseline := map[string]string{podsecurity.EnforceLabel: "baseline"}
	for _, c := range []struct {
		name      string
		objects   []*corev1.Namespace
		targets   []string
		allow     bool
		want      Status
		detail    []string
		fix       []string
		fixAbsent string
	}{
		{name: "unlabelled", objects: []*corev1.Namespace{labelled("demo-app", nil)}, targets: []string{"demo-app"}, want: Fail,
			detail: []string{"demo-app (no pod-security.kubernetes.io/enforce label)", "No Pod Security level is enforced in demo-app: an approved apply", podsecurity.LabelOnlyNote},
			fix:    []string{"kubectl label ns demo-app pod-security.kubernetes.io/enforce=baseline", "--allow-unenforced-namespaces"}},
		{name: "privileged", objects: []*corev1.Namespace{labelled("demo-app", map[string]string{podsecurity.EnforceLabel: "privileged"})}, targets: []string{"demo-app"}, want: Fail,
			detail: []string{"demo-app (pod-security.kubernetes.io/enforce=privileged enforces nothing)"},
			fix:    []string{"kubectl label ns demo-app --overwrite pod-security.kubernetes.io/enforce=baseline"}},
		{name: "unlabelled, allowed", objects: []*corev1.Namespace{labelled("demo-app", nil)}, targets: []string{"demo-app"}, allow: true, want: Warn,
			detail:    []string{"demo-app (no pod-security.kubernetes.io/enforce label)", "allowed by --allow-unenforced-namespaces", podsecurity.LabelOnlyNote},
			fix:       []string{"kubectl label ns demo-app pod-security.kubernetes.io/enforce=baseline"},
			fixAbsent: "pass --allow-unenforced-namespaces"},
		{name: "baseline", objects: []*corev1.Namespace{labelled("demo-app", baseline)}, targets: []string{"demo-app"}, want: Pass,
			detail: []string{"target namespaces: demo-app enforces baseline"}},
		{name: "restricted and baseline", objects: []*corev1.Namespace{labelled("a", baseline), labelled("b", map[string]string{podsecurity.EnforceLabel: "restricted"})},
			targets: []string{"a", "b"}, want: Pass, detail: []string{"a enforces baseline; b enforces restricted"}},
		{name: "not yet created", objects: []*corev1.Namespace{labelled("a", baseline)}, targets: []string{"a", "later"}, want: Warn,
			detail: []string{"later does not exist yet", "Create them enforcing Pod Security"},
			fix:    []string{"kubectl create ns later && kubectl label ns later pod-security.kubernetes.io/enforce=baseline"}},
		{name: "not yet created and one unenforced", objects: []*corev1.Namespace{labelled("a", nil)}, targets: []string{"a", "later"}, want: Fail,
			detail: []string{"a (no pod-security.kubernetes.io/enforce label)", "later does not exist yet"}},
		{name: "no policy", want: Skip, detail: []string{"no --policy"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cs := fake.NewClientset()
			for _, o := range c.objects {
				if _, err := cs.CoreV1().Namespaces().Create(context.Background(), o, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			got := podSecurityCheck(context.Background(), cs.CoreV1().Namespaces(), c.targets, c.allow)
			if got.Name != PodSecurityCheck || got.Status != c.want {
				t.Errorf("status %s, want %s: %+v", got.Status, c.want, got)
			}
			for _, d := range c.detail {
				if !strings.Contains(got.Detail, d) {
					t.Errorf("detail lacks %q: %s", d, got.Detail)
				}
			}
			for _, f := range c.fix {
				if !strings.Contains(got.Fix, f) {
					t.Errorf("fix lacks %q: %s", f, got.Fix)
				}
			}
			if c.fixAbsent != "" && strings.Contains(got.Fix, c.fixAbsent) {
				t.Errorf("fix holds %q: %s", c.fixAbsent, got.Fix)
			}
		})
	}
}

// TestRunChecksPodSecurityFirst: Run reads the target namespaces right after reaching the cluster, before
// any probe, and the check's outcome is among the results whatever the probes do.
func TestRunChecksPodSecurityFirst(t *testing.T) {
	cs := fake.NewClientset(labelled("demo-app", nil))
	checks, err := Run(context.Background(), Options{Client: cs, RuntimeClass: "gvisor", Image: "img", VaultAddr: "http://10.0.0.5:8200",
		Namespaces: []string{"demo-app"}, Timeout: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(checks) < 2 || checks[1].Name != PodSecurityCheck || checks[1].Status != Fail || !strings.Contains(checks[1].Detail, "demo-app") {
		t.Fatalf("checks %+v, want the pod-security failure second", checks)
	}
}
