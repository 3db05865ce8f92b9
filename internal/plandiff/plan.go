// Package plandiff reads a saved Terraform plan as `terraform show -json` describes it — every resource
// change with its values before and after, what is unknown until apply and what is sensitive — for the two
// parties that must judge a plan by its content rather than by a description: the approver's own
// software (the attribute-level diff and the risk flags on the approval screen) and the policy's plan
// rules (evaluated at plan, at approval and inside the apply sandbox before its credential is used).
//
// It runs no program and trusts nothing in its input: values are data, decoded with integers kept exact.
package plandiff

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// MaxShowJSON bounds the `terraform show -json` document Parse accepts.
const MaxShowJSON = 64 << 20

// Plan is the part of a `terraform show -json <planfile>` document that says what the plan changes.
type Plan struct {
	FormatVersion    string
	TerraformVersion string
	// Changes are every resource change of the plan, no-ops included, in Terraform's order.
	Changes []Change
}

// Change is one resource change. Values are decoded JSON: map[string]any, []any, string, bool, nil, and
// numbers as int64 when they are integers, float64 otherwise. Nested blocks are lists of objects, as
// Terraform writes them.
type Change struct {
	Address       string
	ModuleAddress string
	Mode          string // "managed" or "data"
	Type          string
	Name          string
	ProviderName  string
	// Actions are Terraform's: ["no-op"], ["create"], ["read"], ["update"], ["delete"], ["delete","create"]
	// or ["create","delete"].
	Actions      []string
	ActionReason string
	// PreviousAddress is the resource's address before a moved block renamed it ("" when not moved).
	PreviousAddress string
	// Before and After are the values before and after the change (nil for a create's Before and a delete's
	// After).
	Before, After any
	// AfterUnknown mirrors After: true where a value is known only after apply.
	AfterUnknown any
	// BeforeSensitive and AfterSensitive mirror Before and After: true where a value is sensitive.
	BeforeSensitive, AfterSensitive any
	// ReplacePaths are the attribute paths that force a replacement.
	ReplacePaths [][]any
	// Config is the resource's configuration as the plan records it (its "expressions": an attribute the
	// configuration sets is a key, its blocks lists of objects in source order; dynamic blocks are left out),
	// nil when the plan has none for it. It tells a value the provider computes because the configuration
	// leaves it unset from one the configuration computes at apply (View).
	Config any
}

// IsNoOp reports whether the change does nothing.
func (c *Change) IsNoOp() bool {
	return len(c.Actions) == 0 || (len(c.Actions) == 1 && c.Actions[0] == "no-op")
}

// Has reports whether the change's actions include action.
func (c *Change) Has(action string) bool {
	for _, a := range c.Actions {
		if a == action {
			return true
		}
	}
	return false
}

// IsReplace reports whether the change deletes and re-creates the resource.
func (c *Change) IsReplace() bool { return c.Has("delete") && c.Has("create") }

type showJSON struct {
	FormatVersion    string `json:"format_version"`
	TerraformVersion string `json:"terraform_version"`
	ResourceChanges  []struct {
		Address       string `json:"address"`
		ModuleAddress string `json:"module_address"`
		Mode          string `json:"mode"`
		Type          string `json:"type"`
		Name          string `json:"name"`
		ProviderName  string `json:"provider_name"`
		ActionReason  string `json:"action_reason"`
		// PreviousAddress is the address a moved block moved the resource from.
		PreviousAddress string `json:"previous_address"`
		Change          struct {
			Actions         []string `json:"actions"`
			Before          any      `json:"before"`
			After           any      `json:"after"`
			AfterUnknown    any      `json:"after_unknown"`
			BeforeSensitive any      `json:"before_sensitive"`
			AfterSensitive  any      `json:"after_sensitive"`
			ReplacePaths    [][]any  `json:"replace_paths"`
		} `json:"change"`
	} `json:"resource_changes"`
	Configuration struct {
		RootModule configModule `json:"root_module"`
	} `json:"configuration"`
}

// configModule is one module of the plan's configuration.
type configModule struct {
	Resources []struct {
		Mode        string `json:"mode"`
		Type        string `json:"type"`
		Name        string `json:"name"`
		Expressions any    `json:"expressions"`
	} `json:"resources"`
	ModuleCalls map[string]struct {
		Module configModule `json:"module"`
	} `json:"module_calls"`
}

// expressions returns the configuration of the resource mode.type.name in the module at moduleAddress
// ("module.a[0].module.b": instance keys are left out, the configuration has one per call), nil if none.
func (m *configModule) expressions(moduleAddress, mode, typ, name string) any {
	for _, call := range moduleCalls(moduleAddress) {
		c, ok := m.ModuleCalls[call]
		if !ok {
			return nil
		}
		m = &c.Module
	}
	for _, r := range m.Resources {
		if r.Mode == mode && r.Type == typ && r.Name == name {
			return r.Expressions
		}
	}
	return nil
}

// moduleCalls splits a module address ("module.a[0].module.b[\"k.x\"]") into its call names (a, b); nil for
// the root module, and for an address it cannot read, [""] (which names no call).
func moduleCalls(addr string) []string {
	var calls []string
	for addr != "" {
		rest, ok := strings.CutPrefix(addr, "module.")
		if !ok {
			return []string{""}
		}
		end := strings.IndexAny(rest, ".[")
		if end < 0 {
			end = len(rest)
		}
		calls = append(calls, rest[:end])
		rest = rest[end:]
		if strings.HasPrefix(rest, "[") {
			// An instance key: a number or a quoted string, which may hold dots and brackets.
			i, quoted := 1, false
			for ; i < len(rest) && (quoted || rest[i] != ']'); i++ {
				switch {
				case rest[i] == '\\' && quoted:
					i++
				case rest[i] == '"':
					quoted = !quoted
				}
			}
			if i >= len(rest) {
				return []string{""}
			}
			rest = rest[i+1:]
		}
		if rest != "" {
			if rest, ok = strings.CutPrefix(rest, "."); !ok {
				return []string{""}
			}
		}
		addr = rest
	}
	return calls
}

// ErrNotAPlan means the document is not `terraform show -json` of a saved plan.
var ErrNotAPlan = errors.New("not terraform show -json of a plan")

// Parse decodes `terraform show -json <planfile>`.
func Parse(data []byte) (*Plan, error) {
	if len(data) > MaxShowJSON {
		return nil, fmt.Errorf("terraform show -json: more than %d bytes", MaxShowJSON)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var s showJSON
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("decode terraform show -json: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("decode terraform show -json: data after the document: %w", ErrNotAPlan)
	}
	if s.FormatVersion == "" {
		return nil, fmt.Errorf("decode terraform show -json: no format_version: %w", ErrNotAPlan)
	}
	p := &Plan{FormatVersion: s.FormatVersion, TerraformVersion: s.TerraformVersion, Changes: make([]Change, 0, len(s.ResourceChanges))}
	for _, rc := range s.ResourceChanges {
		c := Change{
			Address: rc.Address, ModuleAddress: rc.ModuleAddress, Mode: rc.Mode, Type: rc.Type, Name: rc.Name,
			ProviderName: rc.ProviderName, Actions: rc.Change.Actions, ActionReason: rc.ActionReason, PreviousAddress: rc.PreviousAddress,
			ReplacePaths: rc.Change.ReplacePaths,
			Config:       s.Configuration.RootModule.expressions(rc.ModuleAddress, rc.Mode, rc.Type, rc.Name),
		}
		var err error
		for _, v := range []struct {
			dst *any
			src any
		}{{&c.Before, rc.Change.Before}, {&c.After, rc.Change.After}, {&c.AfterUnknown, rc.Change.AfterUnknown},
			{&c.BeforeSensitive, rc.Change.BeforeSensitive}, {&c.AfterSensitive, rc.Change.AfterSensitive}} {
			if *v.dst, err = normalize(v.src); err != nil {
				return nil, fmt.Errorf("decode terraform show -json: %s: %w", rc.Address, err)
			}
		}
		for i, path := range c.ReplacePaths {
			for j, el := range path {
				if c.ReplacePaths[i][j], err = normalize(el); err != nil {
					return nil, fmt.Errorf("decode terraform show -json: %s: %w", rc.Address, err)
				}
			}
		}
		p.Changes = append(p.Changes, c)
	}
	return p, nil
}

// normalize turns json.Number into int64 (an integer literal within range) or float64.
func normalize(v any) (any, error) {
	switch x := v.(type) {
	case json.Number:
		if n, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return n, nil
		}
		f, err := strconv.ParseFloat(string(x), 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, fmt.Errorf("number %s out of range", x)
		}
		return f, nil
	case map[string]any:
		for k, e := range x {
			n, err := normalize(e)
			if err != nil {
				return nil, err
			}
			x[k] = n
		}
		return x, nil
	case []any:
		for i, e := range x {
			n, err := normalize(e)
			if err != nil {
				return nil, err
			}
			x[i] = n
		}
		return x, nil
	}
	return v, nil
}
