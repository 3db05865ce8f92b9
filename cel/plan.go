package cel

import (
	"context"
	"fmt"

	celgo "github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/interpreter"

	"github.com/agent-sandbox/agent-sandbox/internal/oneline"
	"github.com/agent-sandbox/agent-sandbox/internal/plandiff"
)

// Names of the variables a plan rule can refer to. A plan rule is evaluated once per resource change of a
// Terraform plan, on the values `terraform show -json` gives for it (Terraform's attribute names: nested
// blocks are lists of objects).
const (
	// VarChange is the resource change: address, mode, type, name, actions (a list), action_reason, before
	// and after (the resource's values; an empty map when there are none, as for a create's before).
	VarChange = "change"
	// VarPodSpecs lists every pod spec in the change's after value (a Deployment's template spec, a Pod's
	// spec, a CronJob's job template's pod spec, ...): every object whose "container" is a list of objects.
	VarPodSpecs = "podSpecs"
	// VarPlanPodMetadata lists the metadata beside each of those pod specs (labels, annotations).
	VarPlanPodMetadata = "podMetadata"
	// VarPlanContainers lists the container and init_container entries of every pod spec after the change.
	VarPlanContainers = "containers"
	// VarBeforeContainers lists the same of the change's before value.
	VarBeforeContainers = "beforeContainers"
	// VarVolumes lists the volumes of the pod specs, without their empty values; VarBeforeVolumes the same
	// of the change's before value.
	VarVolumes       = "volumes"
	VarBeforeVolumes = "beforeVolumes"
	// VarPodUnknowns lists the paths of the values inside those pod specs that are known only after apply.
	VarPodUnknowns = "podUnknowns"
	// VarLongValues lists the paths of the strings the change sets that are too long for the approval screen
	// to show whole (plandiff.MaxStringBytes).
	VarLongValues = "longValues"
	// VarHiddenValues lists the paths of the values the change's after marks sensitive, which the approval
	// screen cannot show.
	VarHiddenValues = "hiddenValues"
)

// PlanProgram is a compiled set of plan rules. It is immutable and safe for concurrent use.
type PlanProgram struct {
	rules   []compiledRule
	adapter types.Adapter
}

// Rules returns the rules the program was compiled from, in order.
func (p *PlanProgram) Rules() []Rule {
	if p == nil {
		return nil
	}
	out := make([]Rule, len(p.rules))
	for i, r := range p.rules {
		out[i] = r.Rule
	}
	return out
}

// CompilePlan parses and type-checks plan rules as Compile does admission rules: each must have a unique,
// non-empty name, a one-line message and an expression of type bool; every problem is returned in one
// *CompileError with the rule's path.
func CompilePlan(rules []Rule, opts ...Option) (*PlanProgram, error) {
	o := options{costLimit: DefaultCostLimit, interruptCheck: DefaultInterruptCheckFrequency}
	for _, opt := range opts {
		opt(&o)
	}
	env, err := newPlanEnv()
	if err != nil {
		return nil, fmt.Errorf("create CEL environment: %w", err)
	}
	compiled, errs := compileEach(env, rules, o.programOptions(), nil)
	if len(errs) > 0 {
		return nil, &CompileError{Errs: errs}
	}
	return &PlanProgram{rules: compiled, adapter: env.CELTypeAdapter()}, nil
}

// Evaluate runs every rule on one resource change, as plandiff.View shows it, and returns the rules it
// breaks (false, or not evaluable: a type error on an unknown value, the cost limit, ctx done), nil when it
// breaks none.
func (p *PlanProgram) Evaluate(ctx context.Context, in plandiff.RuleView) []Violation {
	if p == nil {
		return nil
	}
	vars := map[string]any{
		VarChange:           types.NewStringInterfaceMap(p.adapter, orEmptyMap(in.Change)),
		VarPodSpecs:         types.NewDynamicList(p.adapter, orEmptyList(in.PodSpecs)),
		VarPlanPodMetadata:  types.NewDynamicList(p.adapter, orEmptyList(in.PodMetadata)),
		VarPlanContainers:   types.NewDynamicList(p.adapter, orEmptyList(in.Containers)),
		VarBeforeContainers: types.NewDynamicList(p.adapter, orEmptyList(in.BeforeContainers)),
		VarVolumes:          types.NewDynamicList(p.adapter, orEmptyList(in.Volumes)),
		VarBeforeVolumes:    types.NewDynamicList(p.adapter, orEmptyList(in.BeforeVolumes)),
		VarPodUnknowns:      types.NewDynamicList(p.adapter, orEmptyList(in.PodUnknowns)),
		VarLongValues:       types.NewDynamicList(p.adapter, orEmptyList(in.LongValues)),
		VarHiddenValues:     types.NewDynamicList(p.adapter, orEmptyList(in.HiddenValues)),
	}
	act, err := interpreter.NewActivation(vars)
	if err != nil {
		return []Violation{{Rule: "plan-input", Message: "the plan could not be read: " + oneline.Fold(err.Error())}}
	}
	var out []Violation
	for i := range p.rules {
		r := &p.rules[i]
		if err := ctx.Err(); err != nil {
			out = append(out, Violation{Rule: r.Name, Path: r.Path, Message: "rule not evaluated: " + context.Cause(ctx).Error(), Unevaluated: true})
			continue
		}
		val, _, err := r.program.ContextEval(ctx, act)
		if err != nil {
			out = append(out, Violation{Rule: r.Name, Path: r.Path, Message: "rule could not be evaluated, so the change is refused: " + truncate(oneline.Fold(err.Error()), maxReasonBytes), Unevaluated: true})
			continue
		}
		if b, ok := val.(types.Bool); !ok || !bool(b) {
			out = append(out, Violation{Rule: r.Name, Path: r.Path, Message: r.Message})
		}
	}
	return out
}

func orEmptyMap(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

func orEmptyList(l []any) []any {
	if l == nil {
		return []any{}
	}
	return l
}

// newPlanEnv is the CEL environment of plan rules: the Var* plan variables and the same libraries as
// admission rules.
func newPlanEnv() (*celgo.Env, error) {
	dynMap := celgo.MapType(celgo.StringType, celgo.DynType)
	dynList := celgo.ListType(celgo.DynType)
	opts := []celgo.EnvOption{
		celgo.Variable(VarChange, dynMap),
		celgo.Variable(VarPodSpecs, dynList),
		celgo.Variable(VarPlanPodMetadata, dynList),
		celgo.Variable(VarPlanContainers, dynList),
		celgo.Variable(VarBeforeContainers, dynList),
		celgo.Variable(VarVolumes, dynList),
		celgo.Variable(VarBeforeVolumes, dynList),
		celgo.Variable(VarPodUnknowns, dynList),
		celgo.Variable(VarLongValues, dynList),
		celgo.Variable(VarHiddenValues, dynList),
	}
	return celgo.NewEnv(append(opts, libraries()...)...)
}
