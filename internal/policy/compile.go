package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/cel"
	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/schema"
)

// Compiled is a policy that decoded, validated and compiled: its CEL rules and signal patterns are ready
// to evaluate. It is immutable; a new policy is a new Compiled, swapped in whole.
type Compiled struct {
	*Policy
	// Version identifies the source document (a prefix of its SHA-256).
	Version string
	// Rules are the compiled admission rules.
	Rules *cel.Program
	// PlanRules are the compiled plan rules (empty when the policy has none).
	PlanRules *PlanRuleSet
	signals   []compiledSignal
	tools     map[string]*Tool
	settings  map[string]any
}

type compiledSignal struct {
	Signal
	re *regexp.Regexp
}

// SignalMatch is one destructive signal found in plan output.
type SignalMatch struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Line is the line of the output that matched.
	Line string `json:"line"`
}

// LoadOption changes what Load does.
type LoadOption func(*loadOptions)

type loadOptions struct{ skipRules bool }

// WithoutAdmissionRules loads a policy for a process that never evaluates the admission rules (the MCP
// server): everything else is decoded and validated, but the CEL rules are not compiled and Rules is nil.
// The webhook, which enforces them, always compiles them.
func WithoutAdmissionRules() LoadOption { return func(o *loadOptions) { o.skipRules = true } }

// Load decodes, validates and compiles a policy document. Every problem is reported, with its path, in one
// *Error.
func Load(data []byte, opts ...LoadOption) (*Compiled, error) {
	var o loadOptions
	for _, opt := range opts {
		opt(&o)
	}
	p, err := Decode(data)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	return compile(p, hex.EncodeToString(sum[:6]), o)
}

// LoadFile reads and loads a policy file.
func LoadFile(path string, opts ...LoadOption) (*Compiled, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read policy: %w", err)
	}
	c, err := Load(data, opts...)
	if err != nil {
		return nil, fmt.Errorf("policy %s:\n%w", path, err)
	}
	return c, nil
}

// Compile validates a decoded policy and compiles its rules and patterns.
func Compile(p *Policy, version string) (*Compiled, error) { return compile(p, version, loadOptions{}) }

func compile(p *Policy, version string, o loadOptions) (*Compiled, error) {
	e := newError(p.Validate())
	var prog *cel.Program
	if !o.skipRules {
		rules := make([]cel.Rule, len(p.Spec.AdmissionRules))
		for i, r := range p.Spec.AdmissionRules {
			rules[i] = cel.Rule{Path: fmt.Sprintf("spec.admissionRules[%d]", i), Name: r.Name, Expression: r.Expression, Message: r.Message}
		}
		var err error
		if prog, err = cel.Compile(rules, version); err != nil {
			var ce *cel.CompileError
			if !errors.As(err, &ce) {
				return nil, fmt.Errorf("compile admission rules: %w", err)
			}
			for _, fe := range ce.Errs {
				e.Problems = append(e.Problems, fe.Error())
			}
		}
	}
	// Plan rules are compiled by every process: the MCP server renders them into the Jobs that enforce them.
	planRules, err := CompilePlanRules(p.Spec.PlanRules, "spec.planRules")
	if err != nil {
		var pe *Error
		if !errors.As(err, &pe) {
			return nil, fmt.Errorf("compile plan rules: %w", err)
		}
		e.Problems = append(e.Problems, pe.Problems...)
	}
	if len(e.Problems) > 0 {
		return nil, e
	}
	c := &Compiled{Policy: p, Version: version, Rules: prog, PlanRules: planRules, tools: make(map[string]*Tool, len(p.Spec.Tools))}
	for i := range p.Spec.Tools {
		t := &p.Spec.Tools[i]
		c.tools[t.Name] = t
		t.planRules = planRules
		if t.Result.Kind == ResultJSON {
			// Validate compiled it already.
			if t.resultSchema, err = schema.Compile(t.Result.Schema); err != nil {
				return nil, fmt.Errorf("%s: result schema: %w", t.Name, err)
			}
		}
		for j := range t.Parameters {
			if prm := &t.Parameters[j]; prm.Type == TypeString {
				prm.re = regexp.MustCompile(anchor(prm.Pattern)) // Validate compiled it already
			}
		}
	}
	for _, s := range p.Spec.DestructiveSignals {
		c.signals = append(c.signals, compiledSignal{Signal: s, re: regexp.MustCompile(s.Pattern)})
	}
	c.settings = settings(&p.Spec.Sandbox)
	return c, nil
}

// Tool returns the named tool, or ErrUnknownTool: the policy is default-deny.
func (c *Compiled) Tool(name string) (*Tool, error) {
	t, ok := c.tools[name]
	if !ok {
		return nil, fmt.Errorf("%q: %w", name, ErrUnknownTool)
	}
	return t, nil
}

// Scope returns the named credential scope; Validate guarantees every tool's scope exists.
func (c *Compiled) Scope(name string) *Scope {
	for i := range c.Spec.Scopes {
		if c.Spec.Scopes[i].Name == name {
			return &c.Spec.Scopes[i]
		}
	}
	return nil
}

// TargetNamespaces are the namespaces any tool may target (the union of every tool's namespaces), sorted
// and without repeats: where the tools' credentials are minted and what they deploy runs.
func (p *Policy) TargetNamespaces() []string {
	var out []string
	for _, t := range p.Spec.Tools {
		out = append(out, t.Namespaces...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Settings are the values the admission rules see as `settings`. They are computed once per policy; callers
// must not modify the map.
func (c *Compiled) Settings() map[string]any { return c.settings }

func settings(sb *Sandbox) map[string]any {
	tolerations := make([]any, 0, len(sb.Tolerations))
	for _, t := range sb.Tolerations {
		m := map[string]any{"key": t.Key, "operator": string(t.Operator), "value": t.Value, "effect": string(t.Effect)}
		tolerations = append(tolerations, m)
	}
	nodeSelector := make(map[string]any, len(sb.NodeSelector))
	for k, v := range sb.NodeSelector {
		nodeSelector[k] = v
	}
	return map[string]any{
		"runtimeClassName":         sb.RuntimeClassName,
		"maxDeadlineSeconds":       int64(sb.MaxDeadline.Seconds()),
		"runAsUser":                sb.RunAsUser,
		"vaultAudience":            sb.CredentialAgent.VaultAudience,
		"credentialVolume":         contract.CredentialVolume,
		"vaultTokenVolume":         contract.VaultTokenVolume,
		"credentialAgentContainer": contract.CredentialAgentContainer,
		"nodeSelector":             nodeSelector,
		"tolerations":              tolerations,
	}
}

// DetectSignals returns every destructive signal found in plan output, one match per signal and line.
func (c *Compiled) DetectSignals(output string) []SignalMatch {
	var out []SignalMatch
	for _, line := range strings.Split(output, "\n") {
		for _, s := range c.signals {
			if s.re.MatchString(line) {
				out = append(out, SignalMatch{Name: s.Name, Description: s.Description, Line: strings.TrimSpace(line)})
			}
		}
	}
	return out
}
