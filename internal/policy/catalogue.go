package policy

import (
	"encoding/json"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/agent-sandbox/agent-sandbox/internal/schema"
)

// This file makes the policy the tool catalogue: what the MCP server tells an agent about each tool
// (input schema, output schema, title, hints) is derived here from the tool's declaration, so that what
// the agent is shown and what the server and the webhook enforce are one and the same.

// DefaultHints are a tier's hints: a read tool changes nothing and can be repeated; a plan tool changes
// nothing it manages but leaves something behind (a saved plan, a published workspace); an apply tool
// changes, and may destroy. None reaches beyond the cluster.
func DefaultHints(tier Tier) Hints {
	t, f := true, false
	switch tier {
	case TierRead:
		return Hints{ReadOnly: &t, Destructive: &f, Idempotent: &t, OpenWorld: &f}
	case TierPlan:
		return Hints{ReadOnly: &f, Destructive: &f, Idempotent: &f, OpenWorld: &f}
	default:
		return Hints{ReadOnly: &f, Destructive: &t, Idempotent: &f, OpenWorld: &f}
	}
}

// withDefaults fills every hint the policy left out from the tier's defaults.
func (h Hints) withDefaults(tier Tier) Hints {
	d := DefaultHints(tier)
	for _, p := range []struct{ got, def **bool }{{&h.ReadOnly, &d.ReadOnly}, {&h.Destructive, &d.Destructive},
		{&h.Idempotent, &d.Idempotent}, {&h.OpenWorld, &d.OpenWorld}} {
		if *p.got == nil {
			*p.got = *p.def
		}
	}
	return h
}

// Is reports a hint's value (false when unset).
func Is(b *bool) bool { return b != nil && *b }

// readVerbs are the only verbs a read-tier tool's credential may hold.
var readVerbs = sets.New("get", "list", "watch")

// validateCatalogue checks what the catalogue derives from a tool: hints true to the tier (and, for the
// read tier, a credential that can only read, and never Secrets), enums and server-filled parameters that
// fit the rest of the declaration, and a result kind with what it needs.
func (t *Tool) validateCatalogue(fp *field.Path, scope *Scope, params map[string]*Parameter) field.ErrorList {
	var errs field.ErrorList
	hp := fp.Child("hints")
	switch {
	case t.Tier == TierRead && !Is(t.Hints.ReadOnly):
		errs = append(errs, field.Invalid(hp.Child("readOnly"), false, "a read-tier tool is read-only; give it tier plan or apply if it changes anything"))
	case t.Tier == TierApply && Is(t.Hints.ReadOnly):
		errs = append(errs, field.Invalid(hp.Child("readOnly"), true, "an apply-tier tool changes its environment"))
	}
	if Is(t.Hints.ReadOnly) && Is(t.Hints.Destructive) {
		errs = append(errs, field.Invalid(hp.Child("destructive"), true, "a read-only tool cannot be destructive"))
	}
	if t.Tier == TierRead && scope != nil {
		for i, r := range scope.Rules {
			for j, v := range r.Verbs {
				if !readVerbs.Has(v) {
					errs = append(errs, field.Invalid(fp.Child("scope"), t.Scope, fmt.Sprintf("a read-tier tool's credential may only get, list and watch; scope rule %d has verb %q (rules[%d].verbs[%d])", i, v, i, j)))
				}
			}
			if slices.Contains(r.APIGroups, "") && slices.Contains(r.Resources, "secrets") {
				errs = append(errs, field.Invalid(fp.Child("scope"), t.Scope, fmt.Sprintf("a read-tier tool's credential may not read Secrets (scope rule %d)", i)))
			}
		}
	}

	for i := range t.Parameters {
		prm := &t.Parameters[i]
		pp := fp.Child("parameters").Index(i)
		if len(prm.Enum) > 0 && prm.Type != TypeString {
			errs = append(errs, field.Forbidden(pp.Child("enum"), "only string parameters take an enum"))
		}
		for j, v := range prm.Enum {
			if prm.Type != TypeString {
				break
			}
			if _, err := prm.normalizeString(v, false); err != nil {
				errs = append(errs, field.Invalid(pp.Child("enum").Index(j), v, err.Error()))
			}
		}
		switch prm.FilledBy {
		case "":
		case FilledByWorkspace:
			if t.Workspace == nil || t.Workspace.Parameter != prm.Name {
				errs = append(errs, field.Invalid(pp.Child("filledBy"), prm.FilledBy, "only the parameter named by workspace.parameter is filled with the workspace"))
			}
		default:
			errs = append(errs, field.NotSupported(pp.Child("filledBy"), prm.FilledBy, []FilledBy{FilledByWorkspace}))
		}
		if prm.FilledBy != "" && t.NamespaceParameter == prm.Name {
			errs = append(errs, field.Invalid(pp.Child("filledBy"), prm.FilledBy, "the namespace parameter is the agent's choice"))
		}
	}
	if w := t.Workspace; w != nil {
		wp := fp.Child("workspace")
		if prm := params[w.Parameter]; prm != nil && prm.FilledBy != FilledByWorkspace {
			errs = append(errs, field.Invalid(wp.Child("parameter"), w.Parameter, "the workspace ConfigMap is published by the server: mark the parameter filledBy: workspace, so the agent cannot name another ConfigMap"))
		}
		if prm := params[w.From]; prm == nil || prm.Type != TypeString || !prm.Required || prm.FilledBy != "" {
			errs = append(errs, field.Invalid(wp.Child("from"), w.From, "must name a required string parameter the agent gives: the workspace folder"))
		}
	}
	if t.Plan != nil && t.Plan.From != "" {
		errs = append(errs, field.Forbidden(fp.Child("plan", "from"), "a saved plan is named by its ID, not by a folder"))
	}

	rp := fp.Child("result")
	if !slices.Contains(ResultKinds, t.Result.Kind) {
		errs = append(errs, field.NotSupported(rp.Child("kind"), t.Result.Kind, ResultKinds))
	}
	if t.Result.MaxBytes <= 0 || t.Result.MaxBytes > MaxResultBytes {
		errs = append(errs, field.Invalid(rp.Child("maxBytes"), t.Result.MaxBytes, fmt.Sprintf("must be between 1 and %d", MaxResultBytes)))
	}
	switch {
	case t.Result.Kind == ResultJSON && len(t.Result.Schema) == 0:
		errs = append(errs, field.Required(rp.Child("schema"), "a json result declares its JSON Schema; the agent is shown it and every result is checked against it"))
	case t.Result.Kind == ResultJSON:
		errs = append(errs, compileResultSchema(rp.Child("schema"), t.Result.Schema)...)
	case len(t.Result.Schema) > 0:
		errs = append(errs, field.Forbidden(rp.Child("schema"), "only json results declare a schema; the other kinds' are built in"))
	}
	return errs
}

// ReservedResultProperty is the property the MCP server adds to every structured result: the call's
// request ID, its key in the audit log. A json result schema may not declare it.
const ReservedResultProperty = "request_id"

func compileResultSchema(fp *field.Path, doc json.RawMessage) field.ErrorList {
	s, err := schema.Compile(doc)
	if err != nil {
		var errs field.ErrorList
		if se, ok := err.(*schema.Error); ok {
			for _, p := range se.Problems {
				path := fp
				if p.Path != "" {
					path = fp.Child(p.Path)
				}
				errs = append(errs, field.Invalid(path, "", p.Reason))
			}
			return errs
		}
		return field.ErrorList{field.Invalid(fp, "", err.Error())}
	}
	if s.Property(ReservedResultProperty) != nil {
		return field.ErrorList{field.Forbidden(fp.Child("properties", ReservedResultProperty), "the server adds the call's request_id itself")}
	}
	return nil
}

// ResultSchema is the compiled schema of a json result, nil for the other kinds.
func (t *Tool) ResultSchema() *schema.Schema { return t.resultSchema }

// ServerFilled reports whether the MCP server fills the parameter in (the agent never gives it).
func (prm *Parameter) ServerFilled() bool { return prm.FilledBy != "" }

// InputSchema is the JSON Schema of the arguments an agent gives the tool: every parameter but the
// server-filled ones, with its type, description, pattern (anchored, as the policy matches it), length
// and range limits, enum and default. The namespace parameter's enum is the tool's namespaces;
// workspaces, when given, is the enum of the workspace folder parameter (the folders the server found).
func (t *Tool) InputSchema(workspaces []string) map[string]any {
	props := map[string]any{}
	required := []any{}
	for i := range t.Parameters {
		prm := &t.Parameters[i]
		if prm.ServerFilled() {
			continue
		}
		p := map[string]any{"type": string(prm.Type)}
		if prm.Description != "" {
			p["description"] = prm.Description
		}
		switch prm.Type {
		case TypeString:
			p["pattern"] = anchor(prm.Pattern)
			p["maxLength"] = prm.MaxLength
			enum := prm.Enum
			switch {
			case prm.Name == t.NamespaceParameter:
				enum = t.Namespaces
			case t.Workspace != nil && prm.Name == t.Workspace.From && len(workspaces) > 0:
				enum = nil
				for _, w := range workspaces {
					if _, err := prm.normalizeString(w, true); err == nil {
						enum = append(enum, w)
					}
				}
			}
			if len(enum) > 0 {
				p["enum"] = toAny(enum)
			}
		case TypeInteger:
			if prm.Minimum != nil {
				p["minimum"] = *prm.Minimum
			}
			if prm.Maximum != nil {
				p["maximum"] = *prm.Maximum
			}
		}
		if prm.Default != nil {
			if v, err := prm.normalize(prm.Default); err == nil {
				p["default"] = v
			}
		}
		props[prm.Name] = p
		if prm.Required {
			required = append(required, prm.Name)
		}
	}
	s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}

func toAny(list []string) []any {
	out := make([]any, len(list))
	for i, s := range list {
		out[i] = s
	}
	return out
}

// CheckAgentParams applies every check of Invoke to the arguments an agent gave, before the server fills
// in its own parameters: no unknown parameter, none of the server's, every other required one present and
// valid, and a namespace the tool may target. It returns the normalized arguments. The server calls it
// before it publishes anything to the cluster for the call.
func (t *Tool) CheckAgentParams(raw map[string]any) (map[string]any, error) {
	for name := range raw {
		if prm := t.param(name); prm != nil && prm.ServerFilled() {
			return nil, &ParamError{Tool: t.Name, Param: name, Reason: "is filled in by the server, not given"}
		}
	}
	return t.normalizeParams(raw, true)
}
