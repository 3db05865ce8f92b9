package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ClaimSpec is the part of a warm tool's declaration that renders a call's argv and target namespace from
// its parameters: the argv template, the typed parameters and the allowed namespaces. The warm rendering
// passes it to the warm Pod's entry point and credential agent (--claim-spec), so that they render a
// signed claim's parameters themselves and refuse a claim whose argv or namespace is not that rendering —
// whatever signed it. A warm tool's command uses no reserved placeholder (Validate), so this is all it
// needs.
type ClaimSpec struct {
	Tool               string      `json:"tool"`
	Command            []string    `json:"command"`
	Parameters         []Parameter `json:"parameters,omitempty"`
	Namespaces         []string    `json:"namespaces"`
	NamespaceParameter string      `json:"namespaceParameter,omitempty"`
}

// ClaimSpec returns t's ClaimSpec (parameters without their descriptions).
func (t *Tool) ClaimSpec() ClaimSpec {
	params := make([]Parameter, len(t.Parameters))
	for i, p := range t.Parameters {
		p.Description, p.re = "", nil
		params[i] = p
	}
	return ClaimSpec{Tool: t.Name, Command: slices.Clone(t.Command), Parameters: params,
		Namespaces: slices.Clone(t.Namespaces), NamespaceParameter: t.NamespaceParameter}
}

// String is the spec as compact JSON, deterministic (fields in declaration order).
func (s ClaimSpec) String() string {
	b, err := json.Marshal(s)
	if err != nil {
		// Only strings, numbers, booleans and slices of them: cannot fail.
		panic(err)
	}
	return string(b)
}

// ParseClaimSpec reads a --claim-spec flag value strictly.
func ParseClaimSpec(s string) (*ClaimSpec, error) {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	var spec ClaimSpec
	if err := dec.Decode(&spec); err != nil {
		return nil, fmt.Errorf("the claim spec is not a claim spec object: %w", err)
	}
	if dec.More() {
		return nil, errors.New("the claim spec has data after its object")
	}
	if spec.Tool == "" || len(spec.Command) == 0 || len(spec.Namespaces) == 0 {
		return nil, errors.New("the claim spec lacks the tool, its command or its namespaces")
	}
	return &spec, nil
}

// Render types and checks params (canonical JSON, as a claim carries them) as the policy does and returns
// the argv and target namespace the policy renders for them.
func (s *ClaimSpec) Render(params json.RawMessage) (argv []string, namespace string, err error) {
	dec := json.NewDecoder(strings.NewReader(string(params)))
	dec.UseNumber()
	var raw map[string]any
	if err := dec.Decode(&raw); err != nil || raw == nil {
		return nil, "", fmt.Errorf("the claim's parameters are not a JSON object")
	}
	if dec.More() {
		return nil, "", errors.New("the claim's parameters have data after their object")
	}
	t := &Tool{Name: s.Tool, Command: s.Command, Parameters: s.Parameters, Namespaces: s.Namespaces, NamespaceParameter: s.NamespaceParameter}
	inv, err := t.Invoke(raw)
	if err != nil {
		return nil, "", err
	}
	return inv.Argv, inv.TargetNamespace, nil
}
