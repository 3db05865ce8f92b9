package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
)

// Sentinel errors for a call that the policy refuses.
var (
	ErrUnknownTool       = errors.New("tool is not in the policy")
	ErrInvalidParameters = errors.New("invalid parameters")
	ErrNamespaceDenied   = errors.New("namespace is not allowed for this tool")
)

// ParamError says which parameter of a call is wrong and why.
type ParamError struct {
	Tool, Param, Reason string
}

func (e *ParamError) Error() string {
	return fmt.Sprintf("%s: parameter %q %s", e.Tool, e.Param, e.Reason)
}

// Unwrap lets callers test for ErrInvalidParameters.
func (e *ParamError) Unwrap() error { return ErrInvalidParameters }

// Invocation is a call of a tool after the policy accepted it: parameters typed and defaulted, the argv
// rendered, and the scope and target namespace derived from the policy.
type Invocation struct {
	Tool            *Tool
	Params          map[string]any // string, int64 or bool values only
	Argv            []string
	TargetNamespace string
	Scope           string
	// Workspace is the ConfigMap to mount, when the tool has one.
	Workspace string
	// PlanConfigMap is the saved plan's ConfigMap to mount, when the tool applies one.
	PlanConfigMap string
	// CheckArgv is the rendered pre-credential check, when the tool has one.
	CheckArgv []string
	// PlanDigest is the digest of the saved plan the call applies, for tools that declare one.
	PlanDigest string
	// Approvers are the distinct approver key IDs set by SetApprovers, rendered as {{approvers}}.
	Approvers []string
}

// Invoke checks a call against the tool's declaration and renders it. raw holds decoded JSON values
// (string, float64, json.Number, bool) or Go integers. Unknown, missing and malformed parameters are
// errors; so is a target namespace the tool may not use.
func (t *Tool) Invoke(raw map[string]any) (*Invocation, error) {
	params, err := t.normalizeParams(raw, false)
	if err != nil {
		return nil, err
	}
	inv := &Invocation{Tool: t, Params: params, Scope: t.Scope}
	inv.TargetNamespace = t.Namespaces[0]
	if t.NamespaceParameter != "" {
		inv.TargetNamespace, _ = params[t.NamespaceParameter].(string)
	}
	if t.Workspace != nil {
		inv.Workspace, _ = params[t.Workspace.Parameter].(string)
	}
	if t.PlanDigestParameter != "" {
		inv.PlanDigest, _ = params[t.PlanDigestParameter].(string)
	}
	if t.Plan != nil {
		if id, _ := params[t.Plan.Parameter].(string); id != "" {
			inv.PlanConfigMap = contract.PlanConfigMapPrefix + id
		}
	}
	inv.render(nil)
	return inv, nil
}

// render renders the argv templates with the parameters and the reserved placeholders.
func (inv *Invocation) render(approvers []string) {
	values := make(map[string]any, len(inv.Params)+2)
	for k, v := range inv.Params {
		values[k] = v
	}
	values[PlaceholderPlanRules] = inv.Tool.planRules.JSON()
	if len(approvers) > 0 {
		values[PlaceholderApprovers] = strings.Join(approvers, ",")
	}
	inv.Argv = render(inv.Tool.Command, values)
	inv.CheckArgv = nil
	if len(inv.Tool.Check) > 0 {
		inv.CheckArgv = render(inv.Tool.Check, values)
	}
}

// SetApprovers renders the {{approvers}} placeholder: the distinct key IDs of the approvers whose valid
// tokens the call carries (sorted, deduplicated here). Both the MCP server, which attaches the tokens, and
// the webhook, which verifies them, render it, so a Job that claims other approvers than its tokens prove
// is not its rendering.
func (inv *Invocation) SetApprovers(keyIDs []string) {
	ids := slices.Clone(keyIDs)
	slices.Sort(ids)
	inv.Approvers = slices.Compact(ids)
	inv.render(inv.Approvers)
}

// normalizeParams checks raw against the declared parameters and returns them typed and defaulted. In
// agent mode the server-filled parameters are left out of the checks (the server fills them later).
func (t *Tool) normalizeParams(raw map[string]any, agent bool) (map[string]any, error) {
	params := make(map[string]any, len(t.Parameters))
	for name := range raw {
		if t.param(name) == nil {
			return nil, &ParamError{Tool: t.Name, Param: name, Reason: "is not a parameter of this tool"}
		}
	}
	for i := range t.Parameters {
		prm := &t.Parameters[i]
		if agent && prm.ServerFilled() {
			continue
		}
		v, ok := raw[prm.Name]
		if !ok || v == nil {
			if prm.Required {
				return nil, &ParamError{Tool: t.Name, Param: prm.Name, Reason: "is required"}
			}
			if prm.Default == nil {
				continue
			}
			v = prm.Default
		}
		nv, err := prm.normalize(v)
		if err != nil {
			return nil, &ParamError{Tool: t.Name, Param: prm.Name, Reason: err.Error()}
		}
		params[prm.Name] = nv
	}
	if t.NamespaceParameter != "" {
		ns, _ := params[t.NamespaceParameter].(string)
		if !slices.Contains(t.Namespaces, ns) {
			return nil, fmt.Errorf("%s: namespace %q (allowed: %s): %w", t.Name, ns, strings.Join(t.Namespaces, ", "), ErrNamespaceDenied)
		}
	}
	return params, nil
}

// render substitutes parameters into an argv template. An element that names a parameter without a
// value is left out entirely, so "--selector={{label_selector}}" disappears when no selector is given.
func render(template []string, params map[string]any) []string {
	argv := make([]string, 0, len(template))
	for _, el := range template {
		missing := false
		out := placeholderRE.ReplaceAllStringFunc(el, func(m string) string {
			name := placeholderRE.FindStringSubmatch(m)[1]
			v, ok := params[name]
			if !ok {
				missing = true
				return ""
			}
			return formatValue(v)
		})
		if !missing {
			argv = append(argv, out)
		}
	}
	return argv
}

func formatValue(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	case bool:
		return strconv.FormatBool(x)
	}
	return fmt.Sprint(v)
}

func (t *Tool) param(name string) *Parameter {
	for i := range t.Parameters {
		if t.Parameters[i].Name == name {
			return &t.Parameters[i]
		}
	}
	return nil
}

// normalize converts one raw value to the parameter's Go type and checks its constraints.
func (prm *Parameter) normalize(v any) (any, error) {
	switch prm.Type {
	case TypeString:
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("must be a string")
		}
		return prm.normalizeString(s, true)
	case TypeInteger:
		n, err := toInt64(v)
		if err != nil {
			return nil, err
		}
		if prm.Minimum != nil && n < *prm.Minimum {
			return nil, fmt.Errorf("must be at least %d", *prm.Minimum)
		}
		if prm.Maximum != nil && n > *prm.Maximum {
			return nil, fmt.Errorf("must be at most %d", *prm.Maximum)
		}
		return n, nil
	case TypeBoolean:
		b, ok := v.(bool)
		if !ok {
			return nil, fmt.Errorf("must be true or false")
		}
		return b, nil
	}
	return nil, fmt.Errorf("has unsupported type %q", prm.Type)
}

// normalizeString checks a string value: valid UTF-8, within MaxLength, matching the anchored Pattern and,
// with enum set, one of Enum.
func (prm *Parameter) normalizeString(s string, enum bool) (any, error) {
	if !utf8.ValidString(s) {
		return nil, fmt.Errorf("is not valid UTF-8")
	}
	if len(s) > prm.MaxLength {
		return nil, fmt.Errorf("is longer than %d bytes", prm.MaxLength)
	}
	re := prm.re
	if re == nil {
		var err error
		if re, err = regexp.Compile(anchor(prm.Pattern)); err != nil {
			return nil, fmt.Errorf("has an invalid pattern in the policy: %w", err)
		}
	}
	if !re.MatchString(s) {
		return nil, fmt.Errorf("must match %s", prm.Pattern)
	}
	if enum && len(prm.Enum) > 0 && !slices.Contains(prm.Enum, s) {
		return nil, fmt.Errorf("must be one of %s", strings.Join(prm.Enum, ", "))
	}
	return s, nil
}

// Reasons for refusing an integer parameter; the tests look for them.
const (
	reasonNotInteger = "must be an integer"
	reasonNotFinite  = "must be a finite number"
	reasonOutOfRange = "is outside the 64-bit integer range"
)

// toInt64 converts a decoded JSON number (or a Go integer) to int64 exactly, or refuses it. The bounds
// of a float64 are checked as -2^63 <= x < 2^63, both exact in float64: float64(math.MaxInt64) rounds up
// to 2^63, so a test against it lets 2^63 through, and converting 2^63 to int64 is implementation-
// defined in Go (it gives MinInt64 on amd64, which then passes any maximum).
func toInt64(v any) (int64, error) {
	switch x := v.(type) {
	case int:
		return int64(x), nil
	case int8:
		return int64(x), nil
	case int16:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case int64:
		return x, nil
	case uint:
		return uintToInt64(uint64(x))
	case uint8:
		return int64(x), nil
	case uint16:
		return int64(x), nil
	case uint32:
		return int64(x), nil
	case uint64:
		return uintToInt64(x)
	case float32:
		return floatToInt64(float64(x))
	case float64:
		return floatToInt64(x)
	case json.Number:
		// Only an integer literal is an integer here: "1.0" and "1e2" are refused rather than parsed as
		// floats, which would round large values.
		n, err := strconv.ParseInt(string(x), 10, 64)
		if err == nil {
			return n, nil
		}
		if errors.Is(err, strconv.ErrRange) {
			return 0, errors.New(reasonOutOfRange)
		}
		// Not an integer literal: say whether it is out of range (1e19) or not an integer (1.5), without
		// ever accepting it.
		f, ferr := strconv.ParseFloat(string(x), 64)
		switch {
		case ferr != nil && !errors.Is(ferr, strconv.ErrRange):
			return 0, errors.New(reasonNotInteger)
		case math.IsInf(f, 0) && ferr == nil:
			return 0, errors.New(reasonNotFinite)
		case math.IsInf(f, 0) || f < -0x1p63 || f >= 0x1p63:
			return 0, errors.New(reasonOutOfRange)
		}
		return 0, errors.New(reasonNotInteger)
	}
	return 0, errors.New(reasonNotInteger)
}

func floatToInt64(x float64) (int64, error) {
	switch {
	case math.IsNaN(x) || math.IsInf(x, 0):
		return 0, errors.New(reasonNotFinite)
	case x < -0x1p63 || x >= 0x1p63:
		return 0, errors.New(reasonOutOfRange)
	case x != math.Trunc(x):
		return 0, errors.New(reasonNotInteger)
	}
	return int64(x), nil
}

func uintToInt64(x uint64) (int64, error) {
	if x > math.MaxInt64 {
		return 0, errors.New(reasonOutOfRange)
	}
	return int64(x), nil
}
