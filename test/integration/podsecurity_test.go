//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/agent-sandbox/agent-sandbox/broker"
	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app"
	"github.com/agent-sandbox/agent-sandbox/internal/podsecurity"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
)

// TestTargetNamespacesEnforcePodSecurity: against a real kube-apiserver (its Pod Security admission on, as
// it is by default) and a real Vault, `vault configure` and `preflight` refuse the policy's target
// namespace demo-app while it enforces no Pod Security level (no label, then privileged), naming it and the
// kubectl command that fixes it, and configure changes nothing; --allow-unenforced-namespaces turns both
// refusals into warnings; labelled as cluster/manifests/namespaces.yaml labels it (baseline), both pass
// without a word about it. A target namespace that does not exist yet is a warning to preflight.
func TestTargetNamespacesEnforcePodSecurity(t *testing.T) {
	ctx := context.Background()
	target := startVaultTarget(t)
	api := target.api
	const policyFile = "../../policy/policy.yaml"
	namespaces := api.Clientset.CoreV1().Namespaces()
	if _, err := namespaces.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "demo-app"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	run := func(args ...string) (int, string, string) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		code := app.Main(ctx, args, strings.NewReader(""), &stdout, &stderr)
		t.Logf("%s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args[:2], " "), code, stdout.String(), stderr.String())
		return code, stdout.String(), stderr.String()
	}
	configure := func(pol string, extra ...string) (int, string, string) {
		t.Helper()
		return run(target.configureArgs(pol, extra...)...)
	}
	// preflight's probes cannot run here (no node, no RuntimeClass), so it always exits 1; its
	// pod-security check is what is looked at.
	preflightCheck := func(pol string, extra ...string) preflightResult {
		t.Helper()
		_, stdout, _ := run(append([]string{"preflight", "--policy", pol, "--kubeconfig", api.KubeconfigPath, "--timeout", "1s", "-o", "json"}, extra...)...)
		var out struct {
			Checks []preflightResult `json:"checks"`
		}
		if err := json.Unmarshal([]byte(stdout), &out); err != nil {
			t.Fatalf("preflight -o json: %v\n%s", err, stdout)
		}
		for _, c := range out.Checks {
			if c.Name == "pod-security" {
				return c
			}
		}
		t.Fatalf("preflight ran no pod-security check: %s", stdout)
		return preflightResult{}
	}
	contains := func(what, text string, wants ...string) {
		t.Helper()
		for _, w := range wants {
			if !strings.Contains(text, w) {
				t.Errorf("%s lacks %q:\n%s", what, w, text)
			}
		}
	}

	for _, c := range []struct {
		name    string
		labels  map[string]string
		problem string // what the refusal says of demo-app's label
		command string
	}{
		{"unlabelled", nil, "no pod-security.kubernetes.io/enforce label", "kubectl label ns demo-app pod-security.kubernetes.io/enforce=baseline"},
		{"privileged", map[string]string{podsecurity.EnforceLabel: "privileged"}, "pod-security.kubernetes.io/enforce=privileged enforces nothing",
			"kubectl label ns demo-app --overwrite pod-security.kubernetes.io/enforce=baseline"},
	} {
		t.Run("Refused/"+c.name, func(t *testing.T) {
			setLabels(t, namespaces, "demo-app", c.labels)
			code, stdout, stderr := configure(policyFile)
			if code != 1 || stdout != "" {
				t.Errorf("vault configure: exit %d, stdout %q; want 1 and no change printed", code, stdout)
			}
			contains("the refusal", stderr, "error: Pod Security is not enforced in a namespace the policy's tools deploy into", "demo-app: "+c.problem, c.command,
				podsecurity.LabelOnlyNote, "--allow-unenforced-namespaces")
			if _, err := namespaces.Get(ctx, broker.DefaultVaultNamespace, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("the refused configure changed the cluster (namespace %s: %v)", broker.DefaultVaultNamespace, err)
			}
			pc := preflightCheck(policyFile)
			if pc.Status != "FAIL" {
				t.Errorf("preflight pod-security %s, want FAIL: %+v", pc.Status, pc)
			}
			contains("preflight's detail", pc.Detail, "demo-app ("+c.problem+")", podsecurity.LabelOnlyNote)
			contains("preflight's fix", pc.Fix, c.command, "--allow-unenforced-namespaces")
		})
	}

	t.Run("AllowedWithAWarning", func(t *testing.T) {
		setLabels(t, namespaces, "demo-app", nil)
		pc := preflightCheck(policyFile, "--allow-unenforced-namespaces")
		if pc.Status != "WARN" {
			t.Errorf("preflight pod-security %s, want WARN: %+v", pc.Status, pc)
		}
		contains("preflight's warning", pc.Detail, "demo-app (no pod-security.kubernetes.io/enforce label)", "allowed by --allow-unenforced-namespaces")
		code, stdout, stderr := configure(policyFile, "--allow-unenforced-namespaces")
		if code != 0 {
			t.Fatalf("vault configure --allow-unenforced-namespaces: exit %d", code)
		}
		contains("configure's warning", stderr, "WARNING: going on as told, but Pod Security is not enforced", "demo-app: no pod-security.kubernetes.io/enforce label",
			"kubectl label ns demo-app pod-security.kubernetes.io/enforce=baseline")
		contains("configure's changes", stdout, "created role demo-app/agent-sandbox-vault")
	})

	t.Run("LabelledAsTheLocalClusterPasses", func(t *testing.T) {
		setLabels(t, namespaces, "demo-app", localNamespace(t, "demo-app").Labels)
		ns, err := namespaces.Get(ctx, "demo-app", metav1.GetOptions{})
		if err != nil || ns.Labels[podsecurity.EnforceLabel] != "baseline" || ns.Labels["pod-security.kubernetes.io/warn"] != "restricted" ||
			ns.Labels["pod-security.kubernetes.io/audit"] != "restricted" {
			t.Fatalf("the manifest's demo-app labels: %v %v", ns.GetLabels(), err)
		}
		code, _, stderr := configure(policyFile)
		if code != 0 || strings.Contains(stderr, "Pod Security") || strings.Contains(stderr, "warning") {
			t.Errorf("vault configure: exit %d, stderr %q; want 0 and nothing about Pod Security", code, stderr)
		}
		if pc := preflightCheck(policyFile); pc.Status != "PASS" || !strings.Contains(pc.Detail, "demo-app enforces baseline") {
			t.Errorf("preflight pod-security: %+v, want PASS", pc)
		}
		// What baseline is for: the API server itself now refuses a privileged Pod in demo-app.
		priv := true
		_, err = api.Clientset.CoreV1().Pods("demo-app").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "privileged"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox", SecurityContext: &corev1.SecurityContext{Privileged: &priv}}}}},
			metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `violates PodSecurity "baseline:latest"`) {
			t.Errorf("a privileged Pod in demo-app: %v, want refused by Pod Security baseline", err)
		}
	})

	t.Run("NotYetCreatedIsAWarning", func(t *testing.T) {
		data, err := os.ReadFile(policyFile)
		if err != nil {
			t.Fatal(err)
		}
		p, err := policy.Decode(data)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(p.Spec.Tools, func(tl policy.Tool) bool { return tl.Name == "k8s_get_pod_status" })
		if i < 0 {
			t.Fatal("the policy has no k8s_get_pod_status")
		}
		p.Spec.Tools[i].Namespaces = append(p.Spec.Tools[i].Namespaces, "later-app")
		out, err := yaml.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		later := filepath.Join(t.TempDir(), "later-policy.yaml")
		if err := os.WriteFile(later, out, 0o600); err != nil {
			t.Fatal(err)
		}
		pc := preflightCheck(later)
		if pc.Status != "WARN" {
			t.Errorf("preflight pod-security %s, want WARN: %+v", pc.Status, pc)
		}
		contains("preflight's warning", pc.Detail, "demo-app enforces baseline", "later-app does not exist yet")
		contains("preflight's fix", pc.Fix, "kubectl create ns later-app && kubectl label ns later-app pod-security.kubernetes.io/enforce=baseline")
		// configure says so too, then stops as it always did: it cannot give Vault rights in a namespace
		// that does not exist.
		code, _, stderr := configure(later, "--dry-run")
		if code != 1 {
			t.Errorf("vault configure with a missing target namespace: exit %d, want 1", code)
		}
		contains("configure's output", stderr, "warning: namespace later-app, which the policy's tools target, does not exist yet", "target namespace does not exist: later-app")
		if strings.Contains(stderr, "Pod Security is not enforced") {
			t.Errorf("a missing namespace was refused as unenforced:\n%s", stderr)
		}
	})
}

// preflightResult is one check of `preflight -o json`.
type preflightResult struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Detail string `json:"detail"`
	Fix    string `json:"fix"`
}

// setLabels replaces the namespace's pod-security.kubernetes.io labels with those of labels.
func setLabels(t *testing.T, namespaces interface {
	Get(context.Context, string, metav1.GetOptions) (*corev1.Namespace, error)
	Update(context.Context, *corev1.Namespace, metav1.UpdateOptions) (*corev1.Namespace, error)
}, name string, labels map[string]string) {
	t.Helper()
	ns, err := namespaces.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k := range ns.Labels {
		if strings.HasPrefix(k, "pod-security.kubernetes.io/") {
			delete(ns.Labels, k)
		}
	}
	if ns.Labels == nil {
		ns.Labels = map[string]string{}
	}
	for k, v := range labels {
		ns.Labels[k] = v
	}
	if _, err := namespaces.Update(context.Background(), ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}
