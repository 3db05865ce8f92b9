package cel

import (
	"context"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/interpreter"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/agent-sandbox/agent-sandbox/internal/oneline"
)

// ErrUnsupportedKind is returned by NewInput for objects that are neither a batch/v1 Job
// nor a v1 Pod.
var ErrUnsupportedKind = errors.New("unsupported kind: want a batch/v1 Job or a v1 Pod")

// Input is what the rules see of one admission request. Its maps hold JSON-like values
// (map[string]any, []any, string, bool, int64, float64), which Evaluate only reads, so one
// Input may be evaluated concurrently and the Settings map shared by every request.
type Input struct {
	// Object is the whole admitted object.
	Object map[string]any
	// PodSpec is spec.template.spec of a Job or spec of a Pod.
	PodSpec map[string]any
	// Containers holds the initContainers, containers and ephemeralContainers of PodSpec, in
	// that order, so that one rule covers sidecars and debug containers too.
	Containers []any
	// PodMetadata is spec.template.metadata of a Job or metadata of a Pod (labels, annotations).
	PodMetadata map[string]any
	// Settings are the policy settings. Values must be JSON-like as above; map[string]string
	// and []string are accepted too. Typed structs (e.g. []corev1.Toleration) are not.
	Settings map[string]any
	// Kind is "Job" or "Pod".
	Kind string
	// Operation is the admission operation, e.g. "CREATE".
	Operation string
}

// NewInput builds the Input of a rule evaluation from a *batchv1.Job, a *corev1.Pod or an
// *unstructured.Unstructured Job or Pod. Typed objects are converted with
// runtime.DefaultUnstructuredConverter (reflection, no JSON round trip), leaving out
// metadata.managedFields: it is the apiserver's bookkeeping, no admission decision rests on
// it, and converting it would double the cost of the conversion. An unstructured object is
// used as is, without a copy, so the caller must not modify it while rules run.
func NewInput(obj runtime.Object, settings map[string]any, operation string) (Input, error) {
	in := Input{Settings: settings, Operation: operation}
	var err error
	switch o := obj.(type) {
	case *batchv1.Job:
		shallow := *o
		shallow.ManagedFields = nil
		in.Kind = "Job"
		in.Object, err = toUnstructured(&shallow, "batch/v1", in.Kind)
	case *corev1.Pod:
		shallow := *o
		shallow.ManagedFields = nil
		in.Kind = "Pod"
		in.Object, err = toUnstructured(&shallow, "v1", in.Kind)
	case *unstructured.Unstructured:
		switch gk := o.GroupVersionKind().GroupKind(); {
		case gk.Group == "batch" && gk.Kind == "Job", gk.Group == "" && gk.Kind == "Pod":
			in.Kind = gk.Kind
			in.Object = o.Object
		default:
			return Input{}, fmt.Errorf("new input for %s: %w", gk, ErrUnsupportedKind)
		}
	default:
		return Input{}, fmt.Errorf("new input for %T: %w", obj, ErrUnsupportedKind)
	}
	if err != nil {
		return Input{}, fmt.Errorf("new input for %s: %w", in.Kind, err)
	}
	in.PodSpec, in.Containers = podSpecOf(in.Object, in.Kind)
	in.PodMetadata = podMetadataOf(in.Object, in.Kind)
	return in, nil
}

// toUnstructured converts a typed object and fills in apiVersion and kind, which typed
// objects decoded by a client or a webhook often leave empty.
func toUnstructured(obj runtime.Object, apiVersion, kind string) (map[string]any, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("convert to unstructured: %w", err)
	}
	m["apiVersion"] = apiVersion
	m["kind"] = kind
	return m, nil
}

// podSpecOf finds the pod spec of a Job or Pod and gathers all its containers. Missing or
// mistyped fields give an empty result, on which the isolation rules fail.
func podSpecOf(obj map[string]any, kind string) (map[string]any, []any) {
	spec, _ := obj["spec"].(map[string]any)
	if kind == "Job" {
		tmpl, _ := spec["template"].(map[string]any)
		spec, _ = tmpl["spec"].(map[string]any)
	}
	initCs, _ := spec["initContainers"].([]any)
	mainCs, _ := spec["containers"].([]any)
	ephCs, _ := spec["ephemeralContainers"].([]any)
	containers := make([]any, 0, len(initCs)+len(mainCs)+len(ephCs))
	containers = append(containers, initCs...)
	containers = append(containers, mainCs...)
	containers = append(containers, ephCs...)
	return spec, containers
}

// podMetadataOf finds the metadata of the pod a Job or Pod describes.
func podMetadataOf(obj map[string]any, kind string) map[string]any {
	if kind == "Job" {
		spec, _ := obj["spec"].(map[string]any)
		tmpl, _ := spec["template"].(map[string]any)
		m, _ := tmpl["metadata"].(map[string]any)
		return m
	}
	m, _ := obj["metadata"].(map[string]any)
	return m
}

// Violation is a rule that denied the object, or that could not be evaluated.
type Violation struct {
	// Rule is the rule's name.
	Rule string
	// Path is where the rule sits in the policy file.
	Path string
	// Message says what to change, on one line.
	Message string
	// Unevaluated is true when the rule could not be evaluated (it counts as broken).
	Unevaluated bool `json:"-"`
}

// Evaluate runs every rule against in and returns the violations, nil if there are none. A
// rule that evaluates to false yields its Message. A rule whose evaluation fails (a missing
// field read without has(), a type error, the cost limit, ctx done) is a violation too, so
// that the caller fails closed. A nil Program denies everything: no policy is loaded.
//
// Most objects pass, so Evaluate first runs the conjunction of all rules as one program
// (cel-go's cost tracking makes each separate evaluation expensive); only if that is not
// exactly true does it evaluate rule by rule to name the violations.
func (p *Program) Evaluate(ctx context.Context, in Input) []Violation {
	if p == nil {
		return []Violation{{Rule: "policy-loaded", Message: "no compiled policy is loaded; every sandbox object is denied until one is"}}
	}
	act := p.activation(in)
	if p.all != nil && ctx.Err() == nil {
		if val, _, err := p.all.ContextEval(ctx, act); err == nil && val == types.True {
			return nil
		}
	}
	var out []Violation
	for i := range p.rules {
		r := &p.rules[i]
		if ok, err := r.eval(ctx, act); err != nil {
			out = append(out, Violation{Rule: r.Name, Path: r.Path, Message: "rule could not be evaluated, so the object is denied: " + truncate(oneline.Fold(err.Error()), maxReasonBytes), Unevaluated: true})
		} else if !ok {
			out = append(out, Violation{Rule: r.Name, Path: r.Path, Message: r.Message})
		}
	}
	return out
}

// eval evaluates one rule. It checks ctx first because cel-go only polls it inside
// comprehensions.
func (r *compiledRule) eval(ctx context.Context, act *activation) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("evaluation not started: %w", context.Cause(ctx))
	}
	val, _, err := r.program.ContextEval(ctx, act)
	if err != nil {
		return false, err
	}
	b, ok := val.(types.Bool)
	if !ok {
		return false, fmt.Errorf("result is %s, not bool", val.Type())
	}
	return bool(b), nil
}

// activation resolves the rule variables of one Input. The values are wrapped once per
// Evaluate and shared by all rules; cel-go's map and list wrappers convert nested values
// lazily, so nothing is copied.
type activation struct {
	object, podSpec, containers, podMetadata, settings, kind, operation ref.Val
}

var _ interpreter.Activation = (*activation)(nil)

func (p *Program) activation(in Input) *activation {
	return &activation{
		object:      types.NewStringInterfaceMap(p.adapter, in.Object),
		podSpec:     types.NewStringInterfaceMap(p.adapter, in.PodSpec),
		containers:  types.NewDynamicList(p.adapter, in.Containers),
		podMetadata: types.NewStringInterfaceMap(p.adapter, in.PodMetadata),
		settings:    types.NewStringInterfaceMap(p.adapter, in.Settings),
		kind:        types.String(in.Kind),
		operation:   types.String(in.Operation),
	}
}

// ResolveName implements interpreter.Activation.
func (a *activation) ResolveName(name string) (any, bool) {
	switch name {
	case VarObject:
		return a.object, true
	case VarPodSpec:
		return a.podSpec, true
	case VarContainers:
		return a.containers, true
	case VarPodMetadata:
		return a.podMetadata, true
	case VarSettings:
		return a.settings, true
	case VarKind:
		return a.kind, true
	case VarOperation:
		return a.operation, true
	}
	return nil, false
}

// Parent implements interpreter.Activation; there is none.
func (a *activation) Parent() interpreter.Activation { return nil }

// maxReasonBytes bounds the evaluation error quoted in a violation, which ends up in the
// admission response.
const maxReasonBytes = 256

// truncate shortens s to at most n bytes without splitting a UTF-8 sequence.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}
