// Package cel compiles and evaluates the CEL admission rules of an agent-sandbox policy.
//
// It is the only package of agent-sandbox that imports cel-go; the webhook and the policy
// loader depend on the small types declared here (Rule, Input, Violation, Program).
//
// The design follows k8s.io/apiserver's ValidatingAdmissionPolicy: every rule is parsed and
// type-checked once, when a policy version is loaded, and must evaluate to exactly bool; the
// compiled set is then evaluated on every sandbox Job and Pod with a per-rule runtime cost limit
// and the request's context, and any rule that cannot be evaluated counts as a violation, so
// the webhook fails closed. A new policy version is compiled first and swapped in by the webhook
// (webhook.Checker.SetPolicy, an atomic pointer) only when it compiled, so a broken policy never
// replaces a working one.
package cel

import (
	"fmt"
	"strings"

	celgo "github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/ext"
	"github.com/google/cel-go/interpreter"

	"github.com/agent-sandbox/agent-sandbox/internal/oneline"
)

// Names of the variables a rule can refer to.
const (
	// VarObject is the admitted object (a Job or a Pod) as an unstructured map.
	VarObject = "object"
	// VarPodSpec is the pod spec of the object: spec.template.spec of a Job, spec of a Pod.
	VarPodSpec = "podSpec"
	// VarContainers lists initContainers, containers and ephemeralContainers of the pod spec.
	VarContainers = "containers"
	// VarPodMetadata is the pod's metadata: spec.template.metadata of a Job, metadata of a Pod.
	VarPodMetadata = "podMetadata"
	// VarSettings holds the policy's settings (runtime class, deadline limit, ...).
	VarSettings = "settings"
	// VarKind is the kind of the object, "Job" or "Pod".
	VarKind = "kind"
	// VarOperation is the admission operation, for example "CREATE".
	VarOperation = "operation"
)

const (
	// DefaultCostLimit is the runtime cost budget of one rule evaluation. It is the per-call
	// limit Kubernetes applies to ValidatingAdmissionPolicy expressions.
	DefaultCostLimit uint64 = 1_000_000
	// DefaultInterruptCheckFrequency is how many comprehension iterations run between two
	// checks of the context, as in Kubernetes.
	DefaultInterruptCheckFrequency uint = 100
)

// Rule is one admission rule of a policy.
type Rule struct {
	// Path locates the rule in the policy file, for example "spec.admissionRules[3]"; it
	// prefixes every compile error of the rule.
	Path string
	// Name identifies the rule in violations; it must be unique and non-empty.
	Name string
	// Expression is a CEL expression that evaluates to true when the object is acceptable.
	Expression string
	// Message is shown to the user when the expression evaluates to false.
	Message string
}

// FieldError is one problem of one rule, located by the path of the offending field.
type FieldError struct {
	// Path is the offending field, for example "spec.admissionRules[3].expression".
	Path string
	// Detail says what is wrong, on one line.
	Detail string
}

// Error implements error as "<path>: <detail>".
func (e FieldError) Error() string { return e.Path + ": " + e.Detail }

// CompileError lists every problem found while compiling a rule set.
type CompileError struct {
	Errs []FieldError
}

// Error lists the problems, one per line.
func (e *CompileError) Error() string {
	lines := make([]string, len(e.Errs))
	for i, fe := range e.Errs {
		lines[i] = fe.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the individual problems so that errors.As can reach a FieldError.
func (e *CompileError) Unwrap() []error {
	errs := make([]error, len(e.Errs))
	for i, fe := range e.Errs {
		errs[i] = fe
	}
	return errs
}

// Option tunes Compile.
type Option func(*options)

type options struct {
	costLimit      uint64
	interruptCheck uint
}

// WithCostLimit sets the runtime cost budget of each rule evaluation (DefaultCostLimit if
// not given). A rule that exceeds it is reported as a violation.
func WithCostLimit(limit uint64) Option {
	return func(o *options) { o.costLimit = limit }
}

// WithInterruptCheckFrequency sets how many comprehension iterations run between two checks
// of the evaluation context (DefaultInterruptCheckFrequency if not given).
func WithInterruptCheckFrequency(n uint) Option {
	return func(o *options) { o.interruptCheck = n }
}

// Program is a compiled rule set. It is immutable and safe for concurrent use.
type Program struct {
	version string
	rules   []compiledRule
	// all is the conjunction of every rule, evaluated first because most objects pass; nil
	// if there are fewer than two rules or the conjunction did not compile.
	all     celgo.Program
	adapter types.Adapter
	// renderedOnly is true when no rule reads a field that differs between objects of one rendering.
	renderedOnly bool
}

// ReadsOnlyRenderedFields reports whether every rule reads the object only through fields that are the
// same for all Jobs (or all Pods) of one rendering of a tool call — not the object's metadata (name, UID,
// labels, timestamps), the Job's selector or the pod template's labels. When it holds, a verdict on one
// object holds for every object that differs from it only in those fields, so a caller may reuse it.
func (p *Program) ReadsOnlyRenderedFields() bool { return p.renderedOnly }

type compiledRule struct {
	Rule
	program celgo.Program
}

// Version returns the version string given to Compile.
func (p *Program) Version() string { return p.version }

// Rules returns a copy of the rules the program was compiled from, in evaluation order.
func (p *Program) Rules() []Rule {
	out := make([]Rule, len(p.rules))
	for i, r := range p.rules {
		out[i] = r.Rule
	}
	return out
}

// Compile parses and type-checks every rule once and returns the compiled set. Each rule
// must have a unique, non-empty name and an expression whose type is exactly bool. All
// problems are collected and returned together as a *CompileError, each prefixed with the
// rule's path. A failed Compile returns no program: callers keep serving the set they have.
func Compile(rules []Rule, version string, opts ...Option) (*Program, error) {
	o := options{costLimit: DefaultCostLimit, interruptCheck: DefaultInterruptCheckFrequency}
	for _, opt := range opts {
		opt(&o)
	}
	env, err := newEnv()
	if err != nil {
		return nil, fmt.Errorf("create CEL environment: %w", err)
	}
	progOpts := o.programOptions()

	renderedOnly := true
	compiled, errs := compileEach(env, rules, progOpts, func(ast *celgo.Ast) {
		if !readsOnlyRendered(ast.NativeRep().Expr()) {
			renderedOnly = false
		}
	})
	if len(errs) > 0 {
		return nil, &CompileError{Errs: errs}
	}
	return &Program{
		version: version,
		rules:   compiled,
		all:     conjunction(env, compiled, progOpts),
		adapter: env.CELTypeAdapter(),

		renderedOnly: renderedOnly,
	}, nil
}

// programOptions are the evaluation options of every rule: optimised, cost-limited, interruptible.
func (o options) programOptions() []celgo.ProgramOption {
	return []celgo.ProgramOption{
		celgo.EvalOptions(celgo.OptOptimize),
		celgo.CostLimit(o.costLimit),
		celgo.CostTrackerOptions(interpreter.PresenceTestHasCost(false)),
		celgo.InterruptCheckFrequency(o.interruptCheck),
	}
}

// compileEach parses and type-checks each rule in env: a unique, non-empty name, a one-line message, an
// expression of type exactly bool. Every problem is collected with the rule's path; each compiled rule's AST
// is passed to seen (admission rules note which fields they read).
func compileEach(env *celgo.Env, rules []Rule, progOpts []celgo.ProgramOption, seen func(*celgo.Ast)) ([]compiledRule, []FieldError) {
	var errs []FieldError
	firstPath := make(map[string]string, len(rules))
	compiled := make([]compiledRule, 0, len(rules))
	for _, r := range rules {
		switch first, dup := firstPath[r.Name]; {
		case strings.TrimSpace(r.Name) == "":
			errs = append(errs, FieldError{r.Path + ".name", "must not be empty"})
		case dup:
			errs = append(errs, FieldError{r.Path + ".name", fmt.Sprintf("duplicate rule name %q (first used at %s)", r.Name, first)})
		default:
			firstPath[r.Name] = r.Path
		}
		if strings.ContainsAny(r.Message, "\r\n") {
			errs = append(errs, FieldError{r.Path + ".message", "must be a single line"})
		}
		if strings.TrimSpace(r.Expression) == "" {
			errs = append(errs, FieldError{r.Path + ".expression", "must not be empty"})
			continue
		}
		ast, iss := env.Compile(r.Expression)
		if iss.Err() != nil {
			errs = append(errs, FieldError{r.Path + ".expression", issuesLine(iss)})
			continue
		}
		if !ast.OutputType().IsExactType(celgo.BoolType) {
			errs = append(errs, FieldError{r.Path + ".expression", fmt.Sprintf("must evaluate to bool, but evaluates to %s (compare explicitly, e.g. `x == true`)", ast.OutputType())})
			continue
		}
		prg, err := env.Program(ast, progOpts...)
		if err != nil {
			errs = append(errs, FieldError{r.Path + ".expression", oneline.Fold(err.Error())})
			continue
		}
		compiled = append(compiled, compiledRule{Rule: r, program: prg})
		if seen != nil {
			seen(ast)
		}
	}
	return compiled, errs
}

// conjunction compiles "(rule0) && (rule1) && ..." with the per-rule options, for the fast
// path of Evaluate. Each rule sits on lines of its own inside its parentheses, so that a
// trailing // comment cannot swallow what follows; every rule already compiled on its own,
// so the conjunction parses to exactly the rules, and-ed. The conjunction is true only when
// every rule is true, and its cost is the sum of the rules' costs, so within the per-rule
// limit it implies that each rule is within it too. Any failure just disables the fast path.
func conjunction(env *celgo.Env, rules []compiledRule, opts []celgo.ProgramOption) celgo.Program {
	if len(rules) < 2 {
		return nil
	}
	var b strings.Builder
	for i, r := range rules {
		if i > 0 {
			b.WriteString(" && ")
		}
		b.WriteString("(\n")
		b.WriteString(r.Expression)
		b.WriteString("\n)")
	}
	ast, iss := env.Compile(b.String())
	if iss.Err() != nil || !ast.OutputType().IsExactType(celgo.BoolType) {
		return nil
	}
	prg, err := env.Program(ast, opts...)
	if err != nil {
		return nil
	}
	return prg
}

// newEnv returns the CEL environment of admission rules: the variables described by the
// Var* constants and the libraries Kubernetes enables for admission expressions that cel-go
// itself provides (strings, lists, sets, encoders, two-variable comprehensions, optionals).
func newEnv() (*celgo.Env, error) {
	dynMap := celgo.MapType(celgo.StringType, celgo.DynType)
	opts := []celgo.EnvOption{
		celgo.Variable(VarObject, dynMap),
		celgo.Variable(VarPodSpec, dynMap),
		celgo.Variable(VarContainers, celgo.ListType(celgo.DynType)),
		celgo.Variable(VarPodMetadata, dynMap),
		celgo.Variable(VarSettings, dynMap),
		celgo.Variable(VarKind, celgo.StringType),
		celgo.Variable(VarOperation, celgo.StringType),
	}
	return celgo.NewEnv(append(opts, libraries()...)...)
}

// libraries are the CEL options and libraries of every rule environment: those Kubernetes enables for
// admission expressions that cel-go itself provides (strings, lists, sets, encoders, two-variable
// comprehensions, optionals), with literal validation and cross-type numeric comparison.
func libraries() []celgo.EnvOption {
	return []celgo.EnvOption{
		celgo.HomogeneousAggregateLiterals(),
		celgo.EagerlyValidateDeclarations(true),
		celgo.DefaultUTCTimeZone(true),
		celgo.CrossTypeNumericComparisons(true),
		celgo.OptionalTypes(),
		celgo.CostEstimatorOptions(checker.PresenceTestHasCost(false)),
		celgo.ASTValidators(
			celgo.ValidateDurationLiterals(),
			celgo.ValidateTimestampLiterals(),
			celgo.ValidateRegexLiterals(),
			celgo.ValidateHomogeneousAggregateLiterals(),
		),
		ext.Strings(ext.StringsVersion(2)),
		ext.Lists(ext.ListsVersion(3)),
		ext.Sets(),
		ext.Encoders(),
		ext.TwoVarComprehensions(),
	}
}

// issuesLine renders CEL parse and check errors on one line, without the source snippets
// cel-go adds on following lines.
func issuesLine(iss *celgo.Issues) string {
	errs := iss.Errors()
	parts := make([]string, 0, len(errs))
	for _, e := range errs {
		msg := oneline.Fold(e.Message)
		if loc := e.Location; loc != nil && loc.Line() > 0 {
			msg = fmt.Sprintf("%d:%d: %s", loc.Line(), loc.Column()+1, msg)
		}
		parts = append(parts, msg)
	}
	if len(parts) == 0 {
		return oneline.Fold(iss.Err().Error())
	}
	return strings.Join(parts, "; ")
}

// oneLine collapses runs of whitespace, newlines included, to single spaces.
