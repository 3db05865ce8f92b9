package podsecurity

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func namespace(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func enforce(level string) map[string]string { return map[string]string{EnforceLabel: level} }

// TestClassify: only baseline and restricted enforce; no label, privileged, an empty or unknown value do
// not. The warn and audit labels enforce nothing, whatever they say.
func TestClassify(t *testing.T) {
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   State
	}{
		{"no labels", nil, Unenforced},
		{"other labels only", map[string]string{"team": "a"}, Unenforced},
		{"warn and audit restricted, no enforce", map[string]string{"pod-security.kubernetes.io/warn": "restricted", "pod-security.kubernetes.io/audit": "restricted"}, Unenforced},
		{"privileged", enforce("privileged"), Unenforced},
		{"empty value", enforce(""), Unenforced},
		{"not a level", enforce("strict"), Unenforced},
		{"upper case is not a level", enforce("Baseline"), Unenforced},
		{"baseline", enforce("baseline"), Enforced},
		{"restricted", enforce("restricted"), Enforced},
		{"baseline pinned to an old version", map[string]string{EnforceLabel: "baseline", "pod-security.kubernetes.io/enforce-version": "v1.25"}, Enforced},
	} {
		if got := Classify(namespace("ns", c.labels)); got.State != c.want {
			t.Errorf("%s: %s, want %s", c.name, got.State, c.want)
		}
	}
}

// TestCheckRefusesUnenforced: the refusal names every unenforced namespace with what its label says and
// the command that labels it, says that only the label is checked, and leaves out the enforced ones.
func TestCheckRefusesUnenforced(t *testing.T) {
	cs := fake.NewClientset(
		namespace("demo-app", nil),
		namespace("legacy", enforce("privileged")),
		namespace("typo", enforce("baseline ")),
		namespace("good", enforce("baseline")),
		namespace("strict", enforce("restricted")),
	)
	r, err := Check(context.Background(), cs.CoreV1().Namespaces(), []string{"demo-app", "good", "legacy", "strict", "typo"})
	if err != nil {
		t.Fatal(err)
	}
	err = r.Err()
	if !errors.Is(err, ErrUnenforced) {
		t.Fatalf("Err = %v, want ErrUnenforced", err)
	}
	msg := err.Error()
	for _, want := range []string{
		"demo-app: no pod-security.kubernetes.io/enforce label",
		"kubectl label ns demo-app pod-security.kubernetes.io/enforce=baseline",
		"legacy: pod-security.kubernetes.io/enforce=privileged enforces nothing",
		"kubectl label ns legacy --overwrite pod-security.kubernetes.io/enforce=baseline",
		`typo: pod-security.kubernetes.io/enforce="baseline " is not a Pod Security level`,
		"kubectl label ns typo --overwrite pod-security.kubernetes.io/enforce=baseline",
		"Pod Security protects it from what the tool deploys",
		LabelOnlyNote,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("the refusal lacks %q:\n%s", want, msg)
		}
	}
	for _, notWant := range []string{"good", "strict"} {
		if strings.Contains(msg, notWant+":") {
			t.Errorf("the refusal names the enforced namespace %s:\n%s", notWant, msg)
		}
	}
	if got := names(r.Unenforced()); got != "demo-app,legacy,typo" {
		t.Errorf("Unenforced = %s", got)
	}
	if len(r.Warnings()) != 0 {
		t.Errorf("warnings %q, want none: every namespace exists", r.Warnings())
	}
}

// TestCheckPasses: every namespace enforcing baseline or restricted is no refusal and no warning.
func TestCheckPasses(t *testing.T) {
	cs := fake.NewClientset(namespace("a", enforce("baseline")), namespace("b", enforce("restricted")))
	r, err := Check(context.Background(), cs.CoreV1().Namespaces(), []string{"a", "b"})
	if err != nil || r.Err() != nil || len(r.Warnings()) != 0 {
		t.Fatalf("Check = %+v, %v; Err = %v; warnings %q", r, err, r.Err(), r.Warnings())
	}
}

// TestCheckMissingNamespaceWarns: a namespace that does not exist yet is said (with how to create it
// labelled), and is not a refusal by itself.
func TestCheckMissingNamespaceWarns(t *testing.T) {
	cs := fake.NewClientset(namespace("a", enforce("baseline")))
	r, err := Check(context.Background(), cs.CoreV1().Namespaces(), []string{"a", "later"})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Err(); err != nil {
		t.Errorf("a missing namespace refused: %v", err)
	}
	w := r.Warnings()
	if len(w) != 1 || !strings.Contains(w[0], "namespace later, which the policy's tools target, does not exist yet") ||
		!strings.Contains(w[0], "kubectl create ns later && kubectl label ns later pod-security.kubernetes.io/enforce=baseline") {
		t.Errorf("warnings %q", w)
	}
	if got := names(r.Missing()); got != "later" {
		t.Errorf("Missing = %s", got)
	}
}

// TestCheckReadError: a namespace that cannot be read stops the check with its name; it is not taken for
// a missing one.
func TestCheckReadError(t *testing.T) {
	cs := fake.NewClientset()
	cs.PrependReactor("get", "namespaces", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(corev1.Resource("namespaces"), "demo-app", errors.New("no rights"))
	})
	_, err := Check(context.Background(), cs.CoreV1().Namespaces(), []string{"demo-app"})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "read namespace demo-app") {
		t.Fatalf("err %v, want forbidden naming the namespace", err)
	}
}

func names(ns []Namespace) string {
	var s []string
	for _, n := range ns {
		s = append(s, n.Name)
	}
	return strings.Join(s, ",")
}
