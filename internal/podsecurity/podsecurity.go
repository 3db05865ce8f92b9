// Package podsecurity checks that the namespaces the policy's tools deploy into enforce a Pod Security
// level. The sandbox protects the node from the tool; Pod Security protects the node from what the tool
// deploys. An approved terraform apply that creates a privileged or hostPath Pod in a namespace enforcing
// nothing gets that Pod: neither gVisor, nor the webhook (which guards the sandbox namespace only), nor the
// plan rules, which are one more layer and not the last one, stand between it and the node.
//
// `agent-sandbox preflight` and `agent-sandbox vault configure` run this check and refuse a namespace that
// enforces no level, unless told to go on (--allow-unenforced-namespaces). This package is the one place
// that decides what counts as enforced: the pod-security.kubernetes.io/enforce label set to baseline or
// restricted. Only that label is read. A cluster-wide default set in the API server's AdmissionConfiguration
// is not visible through the Kubernetes API, so a namespace that relies on one counts as unenforced here.
package podsecurity

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	psaapi "k8s.io/pod-security-admission/api"
)

// EnforceLabel is the namespace label the Pod Security admission enforces; it is the one label checked.
const EnforceLabel = psaapi.EnforceLevelLabel

// SuggestedLevel is the level the fix commands suggest: the weakest one that refuses privileged Pods,
// hostPath volumes, host namespaces and ports, and added capabilities. A namespace whose Pods all set a
// RuntimeDefault seccomp profile and drop every capability can enforce restricted instead.
const SuggestedLevel = psaapi.LevelBaseline

// LabelOnlyNote says what the check cannot see; every refusal carries it.
const LabelOnlyNote = "Only the namespace label " + EnforceLabel + " is checked: a cluster-wide default set in the API server's AdmissionConfiguration cannot be read through the Kubernetes API."

// ErrUnenforced is wrapped by Report.Err when a target namespace enforces no Pod Security level.
var ErrUnenforced = errors.New("Pod Security is not enforced in a namespace the policy's tools deploy into")

// NamespaceGetter reads one namespace; a clientset's CoreV1().Namespaces() is one.
type NamespaceGetter interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Namespace, error)
}

// State is what the check found in one namespace.
type State string

// The states of a namespace.
const (
	// Enforced: the enforce label names baseline or restricted.
	Enforced State = "enforced"
	// Unenforced: no enforce label, privileged, or a value that is not a level.
	Unenforced State = "unenforced"
	// Missing: the namespace does not exist (yet). That is not a refusal: it is said, and whoever creates
	// it is told to label it.
	Missing State = "missing"
)

// Namespace is the finding for one namespace.
type Namespace struct {
	Name  string
	State State
	// Level is the enforce label's value, "" when there is none.
	Level string
	// Labelled says whether the enforce label is present (possibly empty or privileged).
	Labelled bool
}

// Report holds one finding per namespace checked, in the order they were given.
type Report struct {
	Namespaces []Namespace
}

// Check reads each namespace and classifies its enforce label. The error is for a namespace that cannot
// be read (not allowed, the API server unreachable); a namespace that does not exist is a Missing finding.
func Check(ctx context.Context, namespaces NamespaceGetter, names []string) (*Report, error) {
	r := &Report{}
	for _, name := range names {
		ns, err := namespaces.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			r.Namespaces = append(r.Namespaces, Namespace{Name: name, State: Missing})
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read namespace %s: %w", name, err)
		}
		r.Namespaces = append(r.Namespaces, Classify(ns))
	}
	return r, nil
}

// Classify is the decision for one namespace object: enforced only when its enforce label names baseline
// or restricted. privileged enforces nothing; a value that is not a level is counted as unenforced, since
// the Pod Security admission refuses to store such a label, so one that is stored means the admission is
// not running in this API server.
func Classify(ns *corev1.Namespace) Namespace {
	n := Namespace{Name: ns.Name, State: Unenforced}
	n.Level, n.Labelled = ns.Labels[EnforceLabel]
	if level, err := psaapi.ParseLevel(n.Level); n.Labelled && err == nil && level != psaapi.LevelPrivileged {
		n.State = Enforced
	}
	return n
}

// Unenforced lists the namespaces that exist and enforce no level.
func (r *Report) Unenforced() []Namespace { return r.with(Unenforced) }

// Missing lists the namespaces that do not exist.
func (r *Report) Missing() []Namespace { return r.with(Missing) }

func (r *Report) with(s State) []Namespace {
	var out []Namespace
	for _, n := range r.Namespaces {
		if n.State == s {
			out = append(out, n)
		}
	}
	return out
}

// Err is nil when every existing namespace enforces a level. Otherwise it wraps ErrUnenforced with a
// message that names each namespace, what its label says, the command that labels it, and what the check
// cannot see.
func (r *Report) Err() error {
	bad := r.Unenforced()
	if len(bad) == 0 {
		return nil
	}
	var b strings.Builder
	for _, n := range bad {
		fmt.Fprintf(&b, "\n  %s: %s; label it:\n    %s", n.Name, n.Problem(), n.LabelCommand())
	}
	return fmt.Errorf("%w (an approved apply could run a privileged or hostPath Pod there; the sandbox protects the node from the tool, Pod Security protects it from what the tool deploys):%s\n%s",
		ErrUnenforced, b.String(), LabelOnlyNote)
}

// Warnings are the lines to print whatever the outcome: one per namespace that does not exist yet.
func (r *Report) Warnings() []string {
	var out []string
	for _, n := range r.Missing() {
		out = append(out, fmt.Sprintf("namespace %s, which the policy's tools target, does not exist yet: create it enforcing Pod Security (kubectl create ns %s && %s)",
			n.Name, n.Name, n.LabelCommand()))
	}
	return out
}

// Problem says in a few words why the namespace counts as unenforced.
func (n Namespace) Problem() string {
	switch {
	case n.State == Missing:
		return "does not exist"
	case n.State == Enforced:
		return EnforceLabel + "=" + n.Level
	case !n.Labelled:
		return "no " + EnforceLabel + " label"
	case n.Level == string(psaapi.LevelPrivileged):
		return EnforceLabel + "=privileged enforces nothing"
	default:
		return fmt.Sprintf("%s=%q is not a Pod Security level (privileged, baseline, restricted)", EnforceLabel, n.Level)
	}
}

// LabelCommand is the kubectl command that makes the namespace enforce SuggestedLevel.
func (n Namespace) LabelCommand() string {
	overwrite := ""
	if n.Labelled {
		overwrite = " --overwrite"
	}
	return fmt.Sprintf("kubectl label ns %s%s %s=%s", n.Name, overwrite, EnforceLabel, SuggestedLevel)
}
