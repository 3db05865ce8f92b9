package tfcheck

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	version "github.com/hashicorp/go-version"
	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
)

// argKind says how an argument's value is checked.
type argKind int

const (
	// argExpr is an expression of allowed functions and references.
	argExpr argKind = iota
	// argLiteral is a constant.
	argLiteral
	// argType is a variable's type constraint.
	argType
	// argProviderRef is a resource's provider: kubernetes or kubernetes.ALIAS.
	argProviderRef
	// argIgnoreChanges is lifecycle.ignore_changes: all, or a list of attribute paths.
	argIgnoreChanges
	// argAddress is a moved block's from or to: a resource address.
	argAddress
	// argKeyword is a bare name: a dynamic block's iterator.
	argKeyword
	// argRefList is lifecycle.replace_triggered_by: a list of references. In JSON syntax Terraform
	// parses each string as a native expression, not as a template.
	argRefList
)

// blockRule is what a block's body may hold.
type blockRule struct {
	// what names the block in messages.
	what string
	// args are the arguments allowed, and how each is checked.
	args map[string]argKind
	// anyArgs admits arguments of any (identifier) name, checked as argsKind (locals, .tfvars).
	anyArgs  bool
	argsKind argKind
	// blocks are the nested blocks allowed.
	blocks map[string]*nestedRule
	// open marks a body whose schema the provider defines (a resource's): any argument and any
	// nested block, except the ones Terraform itself acts on (provisioner, connection), which are
	// refused at any depth; dynamic blocks are checked.
	open bool
	// value, if set, checks the constant value of an argument further (the arguments of
	// required_providers and of the lock file).
	value func(c *checker, name string, v cty.Value, pos hcl.Pos)
}

// nestedRule is a kind of nested block.
type nestedRule struct {
	// labels is the number of labels.
	labels int
	// label checks the labels. The body is checked even when they are refused, so that a
	// refusal lists everything wrong (a null_resource and its provisioner).
	label func(c *checker, labels []string, pos hcl.Pos)
	rule  *blockRule
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)

// isIdent reports whether s is a plain ASCII identifier, as Terraform names are.
func isIdent(s string) bool { return identRE.MatchString(s) }

var conditionRule = &blockRule{what: "condition", args: map[string]argKind{"condition": argExpr, "error_message": argExpr}}

var resourceLifecycleRule = &blockRule{
	what: "lifecycle",
	args: map[string]argKind{
		"create_before_destroy": argLiteral,
		"prevent_destroy":       argLiteral,
		"ignore_changes":        argIgnoreChanges,
		"replace_triggered_by":  argRefList,
	},
	blocks: map[string]*nestedRule{
		"precondition":  {rule: conditionRule},
		"postcondition": {rule: conditionRule},
	},
}

var dataLifecycleRule = &blockRule{
	what: "lifecycle",
	blocks: map[string]*nestedRule{
		"precondition":  {rule: conditionRule},
		"postcondition": {rule: conditionRule},
	},
}

// openRule is a nested block of a resource or data source.
var openRule = &blockRule{what: "block", open: true}

var resourceRule = &blockRule{
	what:   "resource",
	open:   true,
	args:   map[string]argKind{"count": argExpr, "for_each": argExpr, "depends_on": argExpr, "provider": argProviderRef},
	blocks: map[string]*nestedRule{"lifecycle": {rule: resourceLifecycleRule}},
}

var dataRule = &blockRule{
	what:   "data",
	open:   true,
	args:   map[string]argKind{"count": argExpr, "for_each": argExpr, "depends_on": argExpr, "provider": argProviderRef},
	blocks: map[string]*nestedRule{"lifecycle": {rule: dataLifecycleRule}},
}

var providerRule = &blockRule{
	what: `provider "kubernetes"`,
	// Only alias: every other argument (config_path, host, token, client_key, ...) and every block
	// (exec runs a program to get a credential) would make Terraform use something other than
	// the sandbox's per-action kubeconfig.
	args: map[string]argKind{"alias": argLiteral},
}

var terraformRule = &blockRule{
	what: "terraform",
	args: map[string]argKind{"required_version": argLiteral},
	blocks: map[string]*nestedRule{
		"required_providers": {rule: &blockRule{
			what:     "required_providers",
			anyArgs:  true,
			argsKind: argLiteral,
			value:    (*checker).requiredProvider,
		}},
	},
}

var variableRule = &blockRule{
	what: "variable",
	args: map[string]argKind{
		"type": argType, "default": argExpr, "description": argExpr,
		"sensitive": argLiteral, "nullable": argLiteral, "ephemeral": argLiteral,
	},
	blocks: map[string]*nestedRule{"validation": {rule: conditionRule}},
}

var outputRule = &blockRule{
	what: "output",
	args: map[string]argKind{
		"value": argExpr, "description": argExpr, "sensitive": argLiteral, "ephemeral": argLiteral,
		"depends_on": argExpr,
	},
	blocks: map[string]*nestedRule{"precondition": {rule: conditionRule}},
}

var movedRule = &blockRule{what: "moved", args: map[string]argKind{"from": argAddress, "to": argAddress}}

var localsRule = &blockRule{what: "locals", anyArgs: true, argsKind: argExpr}

// configRules is a .tf or .tf.json file.
var configRules = &blockRule{
	what: "file",
	blocks: map[string]*nestedRule{
		"terraform": {rule: terraformRule},
		"provider":  {labels: 1, label: labelProvider, rule: providerRule},
		"resource":  {labels: 2, label: labelResource, rule: resourceRule},
		"data":      {labels: 2, label: labelData, rule: dataRule},
		"variable":  {labels: 1, label: labelIdents, rule: variableRule},
		"output":    {labels: 1, label: labelIdents, rule: outputRule},
		"locals":    {rule: localsRule},
		"moved":     {rule: movedRule},
	},
}

// varsRules is a .tfvars or .tfvars.json file: constant values only.
var varsRules = &blockRule{what: "variables file", anyArgs: true, argsKind: argLiteral}

// lockRules is .terraform.lock.hcl.
var lockRules = &blockRule{
	what: "lock file",
	blocks: map[string]*nestedRule{
		"provider": {labels: 1, label: labelLock, rule: &blockRule{
			what:  "provider lock",
			args:  map[string]argKind{"version": argLiteral, "constraints": argLiteral, "hashes": argLiteral},
			value: (*checker).lockValue,
		}},
	},
}

func labelIdents(c *checker, labels []string, pos hcl.Pos) {
	for _, l := range labels {
		if !isIdent(l) {
			c.refuse(pos, "name %q is not a plain identifier", l)
		}
	}
}

func labelProvider(c *checker, labels []string, pos hcl.Pos) {
	if labels[0] != "kubernetes" {
		c.refuse(pos, "provider %q is not allowed: only the kubernetes provider", labels[0])
	}
}

func labelResource(c *checker, labels []string, pos hcl.Pos) {
	labelTyped(c, labels, pos, "resource", resourceTypes, refusedResourceTypes,
		"only the kubernetes provider's resources (others, like null_resource, terraform_data or local_file, can run programs or touch the sandbox)")
}

func labelData(c *checker, labels []string, pos hcl.Pos) {
	labelTyped(c, labels, pos, "data source", dataSourceTypes, refusedDataSourceTypes,
		"only the kubernetes provider's data sources (others, like external, http or terraform_remote_state, run programs or reach the network)")
}

// labelTyped checks the labels of a block that names a type and then a name, as resource and data blocks
// do; kind says which in a refusal. The type must be allowed and not refused (refused says why it is; a
// type of another provider is refused for the reason others gives), and the name a plain identifier.
func labelTyped(c *checker, labels []string, pos hcl.Pos, kind string, allowed map[string]bool, refused map[string]string, others string) {
	typ := labels[0]
	switch why := refused[typ]; {
	case why != "":
		c.refuse(pos, "%s %q is not allowed: %s", kind, typ, why)
	case !allowed[typ]:
		c.refuse(pos, "%s %q is not allowed: %s", kind, typ, others)
	}
	labelIdents(c, labels[1:], pos)
}

func labelLock(c *checker, labels []string, pos hcl.Pos) {
	if labels[0] != lockProviderAddress {
		c.refuse(pos, "lock file provider %q is not allowed: only %s", labels[0], lockProviderAddress)
	}
}

// requiredProvider checks one entry of required_providers: kubernetes only, from the registry
// source, at a version constraint the mirrored provider meets.
func (c *checker) requiredProvider(name string, v cty.Value, pos hcl.Pos) {
	if name != "kubernetes" {
		c.refuse(pos, "required provider %q is not allowed: only kubernetes (any other would be fetched from the network)", name)
		return
	}
	var constraint string
	switch {
	case v.Type() == cty.String:
		// The legacy form: kubernetes = "1.13.4".
		constraint = v.AsString()
	case v.Type().IsObjectType():
		for attr := range v.Type().AttributeTypes() {
			av := v.GetAttr(attr)
			switch {
			case attr != "source" && attr != "version":
				c.refuse(pos, "required_providers kubernetes: %q is not allowed: only source and version", attr)
			case av.IsNull():
			case av.Type() != cty.String:
				c.refuse(pos, "required_providers kubernetes: %s must be a string", attr)
			case attr == "source" && !allowedProviderSources[av.AsString()]:
				c.refuse(pos, "required_providers kubernetes: source %q is not allowed: only hashicorp/kubernetes (the offline mirror)", av.AsString())
			case attr == "version":
				constraint = av.AsString()
			}
		}
	default:
		c.refuse(pos, "required_providers kubernetes must be an object with source and version")
		return
	}
	if constraint == "" {
		return
	}
	cs, err := version.NewConstraint(constraint)
	if err != nil {
		c.refuse(pos, "required_providers kubernetes: version constraint %q: %v", constraint, err)
		return
	}
	if !cs.Check(c.provider) {
		c.refuse(pos, "required_providers kubernetes: version constraint %q does not admit %s, the only version available", constraint, c.provider)
	}
}

// lockValue checks the arguments of a lock file's provider block.
func (c *checker) lockValue(name string, v cty.Value, pos hcl.Pos) {
	switch name {
	case "version":
		if v.Type() != cty.String || v.AsString() != c.provider.String() && v.AsString() != c.opts.ProviderVersion {
			c.refuse(pos, "lock file: version must be %q, the only version available", c.opts.ProviderVersion)
		}
	case "constraints":
		if v.Type() != cty.String {
			c.refuse(pos, "lock file: constraints must be a string")
		}
	case "hashes":
		if !v.Type().IsTupleType() && !v.Type().IsListType() {
			c.refuse(pos, "lock file: hashes must be a list of strings")
			return
		}
		for _, h := range v.AsValueSlice() {
			if h.IsNull() || h.Type() != cty.String || !strings.Contains(h.AsString(), ":") {
				c.refuse(pos, "lock file: hashes must be a list of scheme:hash strings")
				return
			}
		}
	}
}

// refusedBlockReason says why a block type is refused in a rule's body.
func refusedBlockReason(r *blockRule, typ string) string {
	if r == configRules {
		if why := refusedTopBlocks[typ]; why != "" {
			return fmt.Sprintf("%s block: %s", typ, why)
		}
	}
	switch {
	case typ == "provisioner":
		return "provisioner block: provisioners (local-exec, remote-exec, file, ...) run programs or copy files"
	case typ == "connection":
		return "connection block: connections are for provisioners, which are not allowed"
	case r == terraformRule && typ == "backend":
		return "backend block: the runner owns where state is kept; a backend could send state (and credentials) elsewhere or run programs"
	case r == terraformRule && typ == "cloud":
		return "cloud block: HCP Terraform is not allowed; the runner owns where state is kept"
	case r == providerRule && typ == "exec":
		return "exec block in provider: an exec credential plugin runs a program with the sandbox's credential"
	case r == providerRule:
		return fmt.Sprintf("%s block in provider: the kubernetes provider block takes only alias, no nested blocks", typ)
	}
	return fmt.Sprintf("%s block is not allowed in %s", typ, r.what)
}

// refusedArgReason says why an argument is refused in a rule's body.
func refusedArgReason(r *blockRule, name string) string {
	switch {
	case r == providerRule:
		return fmt.Sprintf("argument %s in provider: the kubernetes provider block takes only alias; anything else (config_path, host, token, ...) would replace the sandbox's own credential", name)
	case r == terraformRule:
		return fmt.Sprintf("argument %s in terraform block: only required_version and required_providers", name)
	case r == configRules:
		return fmt.Sprintf("top-level argument %s: a configuration file holds blocks only", name)
	}
	allowed := make([]string, 0, len(r.args))
	for a := range r.args {
		allowed = append(allowed, a)
	}
	slices.Sort(allowed)
	return fmt.Sprintf("argument %s is not allowed in %s (allowed: %s)", name, r.what, strings.Join(allowed, ", "))
}

// forbiddenInOpen says why a nested block type is refused in a resource body at any depth ("" if
// it is not).
func forbiddenInOpen(typ string) string {
	switch typ {
	case "provisioner":
		return "provisioner block: provisioners (local-exec, remote-exec, file, ...) run programs or copy files"
	case "connection":
		return "connection block: connections are for provisioners, which are not allowed"
	}
	return ""
}

// forbiddenDynamic says why a dynamic block may not generate a block type ("" if it may).
func forbiddenDynamic(label string) string {
	switch label {
	case "provisioner", "connection", "lifecycle", "dynamic":
		return fmt.Sprintf("dynamic %q block: Terraform itself acts on %s blocks; they may not be generated", label, label)
	}
	return ""
}
