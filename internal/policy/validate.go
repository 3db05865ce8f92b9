package policy

import (
	"fmt"
	"net/url"
	"path"
	"regexp"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/oneline"
)

var (
	toolNameRE  = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)
	paramNameRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)
	ruleNameRE  = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	// vaultNamespaceRE is a Vault namespace path: names separated by single slashes, none leading or
	// trailing (the agent passes it as one flag value).
	vaultNamespaceRE = regexp.MustCompile(`^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$`)
	// placeholderRE finds "{{name}}" in a command template element.
	placeholderRE = regexp.MustCompile(`\{\{\s*([^{}\s]*)\s*\}\}`)
)

// Validate checks the whole policy and returns every problem with its path.
func (p *Policy) Validate() field.ErrorList {
	var errs field.ErrorList
	if p.APIVersion != APIVersion {
		errs = append(errs, field.NotSupported(field.NewPath("apiVersion"), p.APIVersion, []string{APIVersion}))
	}
	if p.Kind != Kind {
		errs = append(errs, field.NotSupported(field.NewPath("kind"), p.Kind, []string{Kind}))
	}
	if p.Metadata.Name == "" {
		errs = append(errs, field.Required(field.NewPath("metadata", "name"), "name the policy"))
	}
	spec := field.NewPath("spec")
	s := &p.Spec
	if s.ClusterID == "" {
		errs = append(errs, field.Required(spec.Child("clusterID"), "approval tokens are addressed to this cluster ID"))
	} else {
		errs = append(errs, dns1123(spec.Child("clusterID"), s.ClusterID)...)
	}
	errs = append(errs, s.Sandbox.validate(spec.Child("sandbox"))...)
	ap := spec.Child("approval")
	if d := s.Approval.TokenTTL.Duration; d <= 0 || d > approval.MaxTokenTTL {
		errs = append(errs, field.Invalid(ap.Child("tokenTTL"), d.String(), "must be more than 0 and at most "+approval.MaxTokenTTL.String()))
	}
	if s.Approval.RequestTTL.Duration <= 0 {
		errs = append(errs, field.Invalid(ap.Child("requestTTL"), s.Approval.RequestTTL.Duration.String(), "must be more than 0"))
	}

	scopes := sets.New[string]()
	for i, sc := range s.Scopes {
		fp := spec.Child("scopes").Index(i)
		if scopes.Has(sc.Name) {
			errs = append(errs, field.Duplicate(fp.Child("name"), sc.Name))
		}
		scopes.Insert(sc.Name)
		errs = append(errs, sc.validate(fp)...)
	}

	tools := sets.New[string]()
	if len(s.Tools) == 0 {
		errs = append(errs, field.Required(spec.Child("tools"), "declare at least one tool (the policy is default-deny)"))
	}
	accounts := map[string]string{} // ServiceAccount -> the first tool that runs as it
	for i := range s.Tools {
		t := &s.Tools[i]
		fp := spec.Child("tools").Index(i)
		if tools.Has(t.Name) {
			errs = append(errs, field.Duplicate(fp.Child("name"), t.Name))
		}
		tools.Insert(t.Name)
		// Vault's login role, and the webhook's TokenRequest check, know a tool by its ServiceAccount: two
		// tools under one would let the Pods of one log in as the other (a read tool's Pod minting an
		// approval-gated tool's credential). The namespace's default ServiceAccount is anybody's.
		switch other, taken := accounts[t.ServiceAccount]; {
		case taken:
			errs = append(errs, field.Invalid(fp.Child("serviceAccount"), t.ServiceAccount,
				"tool "+other+" runs as this ServiceAccount too; each tool needs its own (Vault's login role binds a tool's credential to its ServiceAccount)"))
		case t.ServiceAccount == "default":
			errs = append(errs, field.Invalid(fp.Child("serviceAccount"), t.ServiceAccount,
				"the namespace's default ServiceAccount is not a tool's own; leave serviceAccount out for tool-<name>"))
		default:
			accounts[t.ServiceAccount] = t.Name
		}
		errs = append(errs, t.validate(fp, s, scopes)...)
	}

	signals := sets.New[string]()
	for i, sig := range s.DestructiveSignals {
		fp := spec.Child("destructiveSignals").Index(i)
		if sig.Name == "" {
			errs = append(errs, field.Required(fp.Child("name"), ""))
		} else if signals.Has(sig.Name) {
			errs = append(errs, field.Duplicate(fp.Child("name"), sig.Name))
		}
		signals.Insert(sig.Name)
		if _, err := regexp.Compile(sig.Pattern); err != nil || sig.Pattern == "" {
			errs = append(errs, field.Invalid(fp.Child("pattern"), sig.Pattern, "not a valid RE2 expression"))
		}
	}

	if len(s.AdmissionRules) == 0 {
		errs = append(errs, field.Required(spec.Child("admissionRules"), "declare the isolation rules; an empty rule set would admit any pod"))
	}
	for i, r := range s.AdmissionRules {
		fp := spec.Child("admissionRules").Index(i)
		if !ruleNameRE.MatchString(r.Name) {
			errs = append(errs, field.Invalid(fp.Child("name"), r.Name, "must be kebab-case (a-z, 0-9, '-')"))
		}
		if strings.TrimSpace(r.Message) == "" || strings.Contains(r.Message, "\n") {
			errs = append(errs, field.Invalid(fp.Child("message"), r.Message, "must be one non-empty line saying what to fix"))
		}
	}
	return errs
}

func (sb *Sandbox) validate(fp *field.Path) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, dns1123(fp.Child("namespace"), sb.Namespace)...)
	if sb.RuntimeClassName == "" {
		errs = append(errs, field.Required(fp.Child("runtimeClassName"), "sandbox pods must run under a sandboxing runtime such as gvisor"))
	}
	if sb.MaxDeadline.Duration <= 0 {
		errs = append(errs, field.Required(fp.Child("maxDeadline"), "bound how long any sandbox may run"))
	}
	if sb.RunAsUser <= 0 {
		errs = append(errs, field.Invalid(fp.Child("runAsUser"), sb.RunAsUser, "must be a non-root UID"))
	}
	ca := fp.Child("credentialAgent")
	c := &sb.CredentialAgent
	if c.Image == "" {
		errs = append(errs, field.Required(ca.Child("image"), "the image that runs `agent-sandbox cred-agent`"))
	}
	errs = append(errs, httpURL(ca.Child("vaultAddress"), c.VaultAddress)...)
	errs = append(errs, httpURL(ca.Child("apiServer"), c.APIServer)...)
	if c.VaultNamespace != "" && !IsVaultNamespace(c.VaultNamespace) {
		errs = append(errs, field.Invalid(ca.Child("vaultNamespace"), c.VaultNamespace,
			"must be a Vault namespace path such as admin/team-a (letters, digits, '_', '.', '-', names separated by single '/', at most 255 characters)"))
	}
	if c.Resources.CPU.Sign() <= 0 || c.Resources.Memory.Sign() <= 0 {
		errs = append(errs, field.Invalid(ca.Child("resources"), describe(c.Resources), "cpu and memory must be more than 0"))
	}
	errs = append(errs, cpuRequest(ca.Child("resources", "cpuRequest"), c.Resources)...)
	return errs
}

func (sc *Scope) validate(fp *field.Path) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, dns1123(fp.Child("name"), sc.Name)...)
	if sc.TTL.Duration < MinCredentialTTL {
		errs = append(errs, field.Invalid(fp.Child("ttl"), sc.TTL.Duration.String(), "Kubernetes refuses service-account tokens shorter than 10m"))
	}
	if len(sc.Rules) == 0 {
		errs = append(errs, field.Required(fp.Child("rules"), "a scope grants at least one RBAC rule"))
	}
	for j, r := range sc.Rules {
		rp := fp.Child("rules").Index(j)
		if len(r.APIGroups) == 0 {
			errs = append(errs, field.Required(rp.Child("apiGroups"), `use [""] for the core group`))
		}
		if len(r.Resources) == 0 {
			errs = append(errs, field.Required(rp.Child("resources"), ""))
		}
		if len(r.Verbs) == 0 {
			errs = append(errs, field.Required(rp.Child("verbs"), ""))
		}
		for name, list := range map[string][]string{"apiGroups": r.APIGroups, "resources": r.Resources, "verbs": r.Verbs} {
			for k, v := range list {
				if strings.Contains(v, "*") {
					errs = append(errs, field.Invalid(rp.Child(name).Index(k), v, "wildcards are not allowed in a credential scope; list each item"))
				}
			}
		}
	}
	return errs
}

// validate checks one tool: its own fields, its parameters and what refers to them, its argv templates,
// and its catalogue and warm-pool settings against the spec it belongs to.
func (t *Tool) validate(fp *field.Path, s *Spec, scopes sets.Set[string]) field.ErrorList {
	var errs field.ErrorList
	if !toolNameRE.MatchString(t.Name) {
		errs = append(errs, field.Invalid(fp.Child("name"), t.Name, "must match "+toolNameRE.String()))
	}
	if strings.TrimSpace(t.Description) == "" {
		errs = append(errs, field.Required(fp.Child("description"), "agents choose tools by their description"))
	}
	switch t.Tier {
	case TierRead, TierPlan, TierApply:
	default:
		errs = append(errs, field.NotSupported(fp.Child("tier"), t.Tier, []Tier{TierRead, TierPlan, TierApply}))
	}
	if !scopes.Has(t.Scope) {
		errs = append(errs, field.NotFound(fp.Child("scope"), t.Scope))
	}
	if len(t.Namespaces) == 0 {
		errs = append(errs, field.Required(fp.Child("namespaces"), "list the namespaces the tool may target"))
	}
	for i, ns := range t.Namespaces {
		errs = append(errs, dns1123(fp.Child("namespaces").Index(i), ns)...)
		if ns == s.Sandbox.Namespace {
			errs = append(errs, field.Forbidden(fp.Child("namespaces").Index(i), "a tool must not target the sandbox namespace itself"))
		}
	}
	errs = append(errs, dns1123(fp.Child("serviceAccount"), t.ServiceAccount)...)
	if t.Image == "" {
		errs = append(errs, field.Required(fp.Child("image"), ""))
	}
	if d := t.Deadline.Duration; d <= 0 || d > s.Sandbox.MaxDeadline.Duration {
		errs = append(errs, field.Invalid(fp.Child("deadline"), d.String(), "must be more than 0 and at most spec.sandbox.maxDeadline ("+s.Sandbox.MaxDeadline.Duration.String()+")"))
	}
	if t.Resources.CPU.Sign() <= 0 || t.Resources.Memory.Sign() <= 0 {
		errs = append(errs, field.Invalid(fp.Child("resources"), describe(t.Resources), "cpu and memory limits must be more than 0"))
	}
	errs = append(errs, cpuRequest(fp.Child("resources", "cpuRequest"), t.Resources)...)

	params, perrs := t.validateParameters(fp)
	errs = append(errs, perrs...)
	errs = append(errs, t.validateParameterRefs(fp, params)...)

	if len(t.Command) == 0 {
		errs = append(errs, field.Required(fp.Child("command"), "the argv template of the tool"))
	}
	errs = append(errs, argvTemplate(fp.Child("command"), t.Command, params)...)
	errs = append(errs, argvTemplate(fp.Child("check"), t.Check, params)...)
	errs = append(errs, t.validatePlanRulesPlaceholders(fp, s)...)
	var scope *Scope
	for i := range s.Scopes {
		if s.Scopes[i].Name == t.Scope {
			scope = &s.Scopes[i]
		}
	}
	errs = append(errs, t.validateCatalogue(fp, scope, params)...)
	if t.WarmPool != nil {
		errs = append(errs, t.validateWarmPool(fp.Child("warmPool"), s)...)
	}
	return errs
}

// validateParameters checks each parameter and that no two share a name or take a reserved placeholder's,
// and returns them by name for the checks that refer to them.
func (t *Tool) validateParameters(fp *field.Path) (map[string]*Parameter, field.ErrorList) {
	var errs field.ErrorList
	params := map[string]*Parameter{}
	for i := range t.Parameters {
		pp := fp.Child("parameters").Index(i)
		prm := &t.Parameters[i]
		if !paramNameRE.MatchString(prm.Name) {
			errs = append(errs, field.Invalid(pp.Child("name"), prm.Name, "must match "+paramNameRE.String()))
		}
		if params[prm.Name] != nil {
			errs = append(errs, field.Duplicate(pp.Child("name"), prm.Name))
		}
		if prm.Name == PlaceholderPlanRules || prm.Name == PlaceholderApprovers {
			errs = append(errs, field.Invalid(pp.Child("name"), prm.Name, "is a reserved placeholder (the policy fills it), not a parameter name"))
		}
		params[prm.Name] = prm
		errs = append(errs, prm.validate(pp)...)
	}
	return params, errs
}

// validateParameterRefs checks that the fields naming one of the tool's parameters (the namespace, the plan
// digest, the workspace, the plan) name one of the right type, and that the mount paths are sound.
func (t *Tool) validateParameterRefs(fp *field.Path, params map[string]*Parameter) field.ErrorList {
	var errs field.ErrorList
	if t.NamespaceParameter != "" {
		if prm := params[t.NamespaceParameter]; prm == nil || prm.Type != TypeString {
			errs = append(errs, field.Invalid(fp.Child("namespaceParameter"), t.NamespaceParameter, "must name a string parameter of this tool"))
		} else if !prm.Required && prm.Default == nil {
			errs = append(errs, field.Invalid(fp.Child("namespaceParameter"), t.NamespaceParameter, "the namespace parameter must be required or have a default"))
		}
	} else if len(t.Namespaces) > 1 {
		errs = append(errs, field.Required(fp.Child("namespaceParameter"), "a tool with several namespaces needs a parameter that picks one"))
	}
	if t.PlanDigestParameter != "" {
		if prm := params[t.PlanDigestParameter]; prm == nil || prm.Type != TypeString || !prm.Required {
			errs = append(errs, field.Invalid(fp.Child("planDigestParameter"), t.PlanDigestParameter, "must name a required string parameter of this tool"))
		}
	}
	if t.Workspace != nil {
		wp := fp.Child("workspace")
		if prm := params[t.Workspace.Parameter]; prm == nil || prm.Type != TypeString {
			errs = append(errs, field.Invalid(wp.Child("parameter"), t.Workspace.Parameter, "must name a string parameter of this tool"))
		}
		if !path.IsAbs(t.Workspace.MountPath) || path.Clean(t.Workspace.MountPath) != t.Workspace.MountPath {
			errs = append(errs, field.Invalid(wp.Child("mountPath"), t.Workspace.MountPath, "must be a clean absolute path"))
		}
	}
	if t.Plan != nil {
		pp := fp.Child("plan")
		if prm := params[t.Plan.Parameter]; prm == nil || prm.Type != TypeString || !prm.Required || prm.Pattern != "[a-f0-9]{64}" {
			errs = append(errs, field.Invalid(pp.Child("parameter"), t.Plan.Parameter, "must name a required string parameter with pattern [a-f0-9]{64} (a plan ID)"))
		}
		if !path.IsAbs(t.Plan.MountPath) || path.Clean(t.Plan.MountPath) != t.Plan.MountPath {
			errs = append(errs, field.Invalid(pp.Child("mountPath"), t.Plan.MountPath, "must be a clean absolute path"))
		}
		if t.Workspace != nil && t.Workspace.MountPath == t.Plan.MountPath {
			errs = append(errs, field.Duplicate(pp.Child("mountPath"), t.Plan.MountPath))
		}
	}
	return errs
}

// validatePlanRulesPlaceholders makes the Terraform tools of a policy with plan rules enforce them where the
// agent cannot reach: the plan tool's command and the apply tool's pre-credential check must take
// {{plan_rules}}, and the check the approvers too. Without it, plan rules would bind no sandbox.
func (t *Tool) validatePlanRulesPlaceholders(fp *field.Path, s *Spec) field.ErrorList {
	if len(s.PlanRules) == 0 {
		return nil
	}
	has := func(argv []string, name string) bool {
		for _, el := range argv {
			for _, m := range placeholderRE.FindAllStringSubmatch(el, -1) {
				if m[1] == name {
					return true
				}
			}
		}
		return false
	}
	var errs field.ErrorList
	switch t.Result.Kind {
	case ResultTerraformPlan:
		if !has(t.Command, PlaceholderPlanRules) {
			errs = append(errs, field.Invalid(fp.Child("command"), t.Command, "a terraform-plan tool must pass {{plan_rules}} (e.g. --plan-rules={{plan_rules}}) so that its sandbox enforces spec.planRules"))
		}
	case ResultTerraformApply:
		if !has(t.Check, PlaceholderPlanRules) || !has(t.Check, PlaceholderApprovers) {
			errs = append(errs, field.Invalid(fp.Child("check"), t.Check, "a terraform-apply tool's check must pass {{plan_rules}} and {{approvers}} (--plan-rules={{plan_rules}} --approvers={{approvers}}) so that the saved plan is judged before any credential exists"))
		}
	}
	return errs
}

// Warm-pool bounds: a pool is a handful of Pods, and an idle Pod must be replaced well within a token's
// and a credential's lifetime.
const (
	maxWarmPool        = 16
	minWarmIdleTimeout = 30 * time.Second
	maxWarmIdleTimeout = time.Hour
)

func (t *Tool) validateWarmPool(fp *field.Path, s *Spec) field.ErrorList {
	var errs field.ErrorList
	w := t.WarmPool
	if t.Workspace != nil || t.Plan != nil || len(t.Check) > 0 {
		errs = append(errs, field.Forbidden(fp, "a tool whose Pod mounts per-call inputs (workspace, plan) or runs a check cannot be warm: those are known only at the call"))
	}
	for i, el := range t.Command {
		for _, m := range placeholderRE.FindAllStringSubmatch(el, -1) {
			if m[1] == PlaceholderPlanRules || m[1] == PlaceholderApprovers {
				errs = append(errs, field.Forbidden(fp, fmt.Sprintf("command[%d] uses {{%s}}: a warm Pod renders its claim's argv from the parameters alone (ClaimSpec), so a warm tool's command names only parameters", i, m[1])))
			}
		}
	}
	if t.Image != s.Sandbox.CredentialAgent.Image {
		errs = append(errs, field.Invalid(fp, t.Image, "a warm tool must run in the agent-sandbox image (spec.sandbox.credentialAgent.image): its warm entry point executes the claimed argv"))
	}
	if w.Min < 0 || w.Min > maxWarmPool {
		errs = append(errs, field.Invalid(fp.Child("min"), w.Min, fmt.Sprintf("must be between 0 and %d", maxWarmPool)))
	}
	if w.Max < w.Min || w.Max > maxWarmPool {
		errs = append(errs, field.Invalid(fp.Child("max"), w.Max, fmt.Sprintf("must be at least min and at most %d", maxWarmPool)))
	}
	if d := w.IdleTimeout.Duration; d < minWarmIdleTimeout || d > maxWarmIdleTimeout {
		errs = append(errs, field.Invalid(fp.Child("idleTimeout"), d.String(), fmt.Sprintf("must be between %s and %s", minWarmIdleTimeout, maxWarmIdleTimeout)))
	}
	if total := w.IdleTimeout.Duration + t.Deadline.Duration; total > s.Sandbox.MaxDeadline.Duration+maxWarmIdleTimeout {
		errs = append(errs, field.Invalid(fp.Child("idleTimeout"), w.IdleTimeout.Duration.String(), "idle timeout plus deadline is too long"))
	}
	return errs
}

// argvTemplate checks that every placeholder of an argv template names a declared parameter.
func argvTemplate(fp *field.Path, template []string, params map[string]*Parameter) field.ErrorList {
	var errs field.ErrorList
	for i, el := range template {
		for _, m := range placeholderRE.FindAllStringSubmatch(el, -1) {
			if m[1] == PlaceholderPlanRules || m[1] == PlaceholderApprovers {
				continue
			}
			if params[m[1]] == nil {
				errs = append(errs, field.Invalid(fp.Index(i), el, "names undeclared parameter "+m[1]))
			}
		}
		if strings.Count(el, "{{") != len(placeholderRE.FindAllString(el, -1)) {
			errs = append(errs, field.Invalid(fp.Index(i), el, `malformed placeholder; write {{name}}`))
		}
	}
	return errs
}

func (prm *Parameter) validate(pp *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch prm.Type {
	case TypeString:
		if prm.Pattern == "" {
			errs = append(errs, field.Required(pp.Child("pattern"), "every string parameter needs a pattern so nothing else can be passed"))
		} else if _, err := regexp.Compile(anchor(prm.Pattern)); err != nil {
			errs = append(errs, field.Invalid(pp.Child("pattern"), prm.Pattern, oneline.Fold(err.Error())))
		}
		if prm.MaxLength <= 0 || prm.MaxLength > 4096 {
			errs = append(errs, field.Invalid(pp.Child("maxLength"), prm.MaxLength, "must be between 1 and 4096"))
		}
	case TypeInteger, TypeBoolean:
		if prm.Pattern != "" {
			errs = append(errs, field.Forbidden(pp.Child("pattern"), "only string parameters take a pattern"))
		}
	default:
		errs = append(errs, field.NotSupported(pp.Child("type"), prm.Type, []ParameterType{TypeString, TypeInteger, TypeBoolean}))
	}
	if prm.Default != nil {
		if prm.Required {
			errs = append(errs, field.Forbidden(pp.Child("default"), "a required parameter has no default"))
		} else if _, err := prm.normalize(prm.Default); err != nil {
			errs = append(errs, field.Invalid(pp.Child("default"), describe(prm.Default), err.Error()))
		}
	}
	return errs
}

// IsVaultNamespace reports whether s is a Vault Enterprise / HCP Vault namespace path agent-sandbox accepts:
// names of letters, digits, '_', '.' and '-', separated by single slashes, at most 255 characters.
func IsVaultNamespace(s string) bool { return len(s) <= 255 && vaultNamespaceRE.MatchString(s) }

func dns1123(fp *field.Path, v string) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Label(v) {
		errs = append(errs, field.Invalid(fp, v, msg))
	}
	return errs
}

func httpURL(fp *field.Path, v string) field.ErrorList {
	u, err := url.Parse(v)
	if v == "" {
		return field.ErrorList{field.Required(fp, "")}
	}
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return field.ErrorList{field.Invalid(fp, v, "must be an http(s) URL with a host")}
	}
	return nil
}

// anchor makes a pattern match whole values only.
func anchor(p string) string { return `^(?:` + p + `)$` }

// cpuRequest checks an explicit CPU request: more than 0 and at most the CPU limit (Kubernetes refuses a
// request above the limit; a request of 0 would let the scheduler pack sandboxes without bound).
func cpuRequest(fp *field.Path, r Resources) field.ErrorList {
	if r.CPURequest == nil {
		return nil
	}
	if r.CPURequest.Sign() <= 0 || r.CPURequest.Cmp(r.CPU) > 0 {
		return field.ErrorList{field.Invalid(fp, r.CPURequest.String(), "must be more than 0 and at most cpu ("+r.CPU.String()+")")}
	}
	return nil
}
