package tfcheck

import (
	"fmt"
	"maps"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// exprMode says what an expression may contain.
type exprMode int

const (
	// modeExpr admits allowed function calls and references.
	modeExpr exprMode = iota
	// modeLiteral admits constants only: literal values, strings, tuples and objects of them.
	modeLiteral
	// modeType admits a type constraint: string, list(object({a = number})), optional(...).
	modeType
)

// scope holds the names an expression binds itself (for expression variables, dynamic block
// iterators); they shadow Terraform's own root names, so a reference to one is not a reference to
// the outside world.
type scope map[string]bool

func (s scope) with(names ...string) scope {
	n := maps.Clone(s)
	if n == nil {
		n = scope{}
	}
	for _, name := range names {
		if name != "" {
			n[name] = true
		}
	}
	return n
}

// expr checks a native-syntax expression (also the templates of JSON strings) and everything in it.
func (c *checker) expr(e hclsyntax.Expression, mode exprMode, sc scope) {
	c.walkExpr(e, mode, sc, 0)
}

// walkExpr checks one expression and, within the depth and count limits, everything in it. A type
// expression is checked as such; any other expression is either structure (literals, templates,
// collections), walked into whatever the mode, or an evaluated expression, which a constant mode refuses.
func (c *checker) walkExpr(e hclsyntax.Expression, mode exprMode, sc scope, depth int) {
	if e == nil || c.full() {
		return
	}
	pos := e.StartRange().Start
	if depth > maxExprDepth {
		c.refuse(pos, "expression nested more than %d deep", maxExprDepth)
		return
	}
	if !c.count(pos) {
		return
	}
	d := depth + 1
	if mode == modeType {
		c.typeExpr(e, sc, d)
		return
	}
	if c.walkStructure(e, mode, sc, d) {
		return
	}
	c.walkEvaluated(e, mode, sc, d, pos)
}

// walkExprs walks each of es, in order, as walkExpr does.
func (c *checker) walkExprs(mode exprMode, sc scope, d int, es ...hclsyntax.Expression) {
	for _, e := range es {
		c.walkExpr(e, mode, sc, d)
	}
}

// walkStructure walks into an expression that only assembles values (literals, templates, tuples,
// objects, parentheses) and reports whether e was one. These are allowed in every mode.
func (c *checker) walkStructure(e hclsyntax.Expression, mode exprMode, sc scope, d int) bool {
	switch e := e.(type) {
	case *hclsyntax.LiteralValueExpr:
	case *hclsyntax.TemplateExpr:
		c.walkExprs(mode, sc, d, e.Parts...)
	case *hclsyntax.TemplateWrapExpr:
		c.walkExpr(e.Wrapped, mode, sc, d)
	case *hclsyntax.TupleConsExpr:
		c.walkExprs(mode, sc, d, e.Exprs...)
	case *hclsyntax.ObjectConsExpr:
		for _, item := range e.Items {
			c.walkExprs(mode, sc, d, item.KeyExpr, item.ValueExpr)
		}
	case *hclsyntax.ObjectConsKeyExpr:
		// A key that is a bare name (app = ...) is a literal string, not a reference; anything
		// else (a parenthesized name, a.b, a call) is evaluated. This is hclsyntax's own rule.
		if t, ok := e.Wrapped.(*hclsyntax.ScopeTraversalExpr); ok && len(t.Traversal) == 1 && !e.ForceNonLiteral {
			return true
		}
		c.walkExpr(e.Wrapped, mode, sc, d)
	case *hclsyntax.ParenthesesExpr:
		c.walkExpr(e.Expression, mode, sc, d)
	case *hclsyntax.AnonSymbolExpr:
		// The element placeholder of a splat.
	case *hclsyntax.TemplateJoinExpr:
		c.walkExpr(e.Tuple, mode, sc, d)
	default:
		return false
	}
	return true
}

// walkEvaluated checks an expression that computes (operators, calls, references, indexing, splats,
// conditionals, for expressions): refused where only constants are allowed, else walked into. A kind of
// expression it does not know is refused.
func (c *checker) walkEvaluated(e hclsyntax.Expression, mode exprMode, sc scope, d int, pos hcl.Pos) {
	if mode == modeLiteral {
		if why, refused := notConstant(e); refused {
			c.refuse(pos, "%s", why)
			return
		}
	}
	switch e := e.(type) {
	case *hclsyntax.UnaryOpExpr:
		c.walkExpr(e.Val, mode, sc, d)
	case *hclsyntax.FunctionCallExpr:
		c.call(e, pos)
		c.walkExprs(mode, sc, d, e.Args...)
	case *hclsyntax.ScopeTraversalExpr:
		c.reference(e.Traversal, sc, pos)
	case *hclsyntax.RelativeTraversalExpr:
		c.walkExpr(e.Source, mode, sc, d)
	case *hclsyntax.IndexExpr:
		c.walkExprs(mode, sc, d, e.Collection, e.Key)
	case *hclsyntax.SplatExpr:
		c.walkExprs(mode, sc, d, e.Source, e.Each)
	case *hclsyntax.BinaryOpExpr:
		c.walkExprs(mode, sc, d, e.LHS, e.RHS)
	case *hclsyntax.ConditionalExpr:
		c.walkExprs(mode, sc, d, e.Condition, e.TrueResult, e.FalseResult)
	case *hclsyntax.ForExpr:
		// The collection is evaluated outside the for expression's own names.
		c.walkExpr(e.CollExpr, mode, sc, d)
		c.walkExprs(mode, sc.with(e.KeyVar, e.ValVar), d, e.KeyExpr, e.ValExpr, e.CondExpr)
	default:
		// A kind of expression this checker does not know (say, from a newer hclsyntax) is refused
		// rather than passed over.
		c.refuse(pos, "unsupported expression (%T)", e)
	}
}

// notConstant says why e is refused where only constants are allowed: every expression that computes is,
// except a negation (how a negative number is written); a call and a reference are named in the refusal.
// An expression of a kind it does not know is not its to refuse: walkEvaluated refuses that as unsupported.
func notConstant(e hclsyntax.Expression) (why string, refused bool) {
	const only = "only constant values are allowed here"
	switch e := e.(type) {
	case *hclsyntax.UnaryOpExpr:
		return only, e.Op != hclsyntax.OpNegate
	case *hclsyntax.FunctionCallExpr:
		return fmt.Sprintf("function call %s(): %s", e.Name, only), true
	case *hclsyntax.ScopeTraversalExpr:
		return fmt.Sprintf("reference %s: %s", traversalString(e.Traversal), only), true
	case *hclsyntax.RelativeTraversalExpr, *hclsyntax.IndexExpr, *hclsyntax.SplatExpr, *hclsyntax.BinaryOpExpr,
		*hclsyntax.ConditionalExpr, *hclsyntax.ForExpr:
		return only, true
	}
	return "", false
}

// call checks a function name against the allowlist.
func (c *checker) call(e *hclsyntax.FunctionCallExpr, pos hcl.Pos) {
	name := e.Name
	switch {
	case strings.HasPrefix(name, "provider::"):
		c.refuse(pos, "function %s(): provider-defined functions are not allowed (they run provider code outside the plan's resources)", name)
	case strings.Contains(name, "::"):
		c.refuse(pos, "function %s(): namespaced function names are not allowed", name)
	case functions[name]:
	case refusedFunctions[name] != "":
		c.refuse(pos, "function %s() is not allowed: %s", name, refusedFunctions[name])
	default:
		c.refuse(pos, "function %s() is not allowed: not a known pure function", name)
	}
}

// reference checks what a reference names. Terraform resolves the root name of a traversal (var,
// local, data, a resource type, ...); see its addrs.parseRef.
func (c *checker) reference(t hcl.Traversal, sc scope, pos hcl.Pos) {
	root := t.RootName()
	if sc[root] {
		return
	}
	attr := func(i int) (string, bool) {
		if len(t) <= i {
			return "", false
		}
		a, ok := t[i].(hcl.TraverseAttr)
		return a.Name, ok
	}
	switch root {
	case "var", "local", "path", "count", "each", "self":
		return
	case "terraform":
		name, ok := attr(1)
		switch {
		case ok && name == "workspace":
			return
		case ok && name == "applying":
			c.refuse(pos, "reference terraform.applying is not allowed: it lets a plan look harmless and act differently at apply")
		default:
			c.refuse(pos, "reference %s is not allowed: of terraform.*, only terraform.workspace", traversalString(t))
		}
	case "data":
		typ, ok := attr(1)
		if !ok || !dataSourceTypes[typ] {
			c.refuse(pos, "reference %s is not allowed: not an allowed kubernetes data source", traversalString(t))
		}
	case "resource":
		typ, ok := attr(1)
		if !ok || !resourceTypes[typ] {
			c.refuse(pos, "reference %s is not allowed: not an allowed kubernetes resource", traversalString(t))
		}
	case "module":
		c.refuse(pos, "reference %s is not allowed: modules are not allowed", traversalString(t))
	default:
		if !resourceTypes[root] {
			c.refuse(pos, "reference %s is not allowed: %q is not a known name (var, local, data, path, count, each, self, terraform.workspace or an allowed kubernetes resource type)", traversalString(t), root)
		}
	}
}

// typeExpr checks a type constraint: it is read by Terraform's typeexpr, never evaluated, so it
// may only be made of type keywords and type constructors.
func (c *checker) typeExpr(e hclsyntax.Expression, sc scope, depth int) {
	pos := e.StartRange().Start
	switch e := e.(type) {
	case *hclsyntax.ScopeTraversalExpr:
		if len(e.Traversal) != 1 || !typeKeywords[e.Traversal.RootName()] {
			c.refuse(pos, "%s is not a type", traversalString(e.Traversal))
		}
	case *hclsyntax.FunctionCallExpr:
		if !typeFunctions[e.Name] {
			c.refuse(pos, "%s() is not a type constructor", e.Name)
			return
		}
		for i, a := range e.Args {
			if e.Name == "optional" && i == 1 {
				// optional(type, default): the default is a constant value.
				c.walkExpr(a, modeLiteral, sc, depth)
				continue
			}
			c.walkExpr(a, modeType, sc, depth)
		}
	case *hclsyntax.ObjectConsExpr:
		for _, item := range e.Items {
			k, ok := item.KeyExpr.(*hclsyntax.ObjectConsKeyExpr)
			if !ok {
				c.refuse(pos, "invalid object type attribute")
				continue
			}
			if t, ok := k.Wrapped.(*hclsyntax.ScopeTraversalExpr); !ok || len(t.Traversal) != 1 || k.ForceNonLiteral {
				c.walkExpr(k.Wrapped, modeLiteral, sc, depth)
			}
			c.walkExpr(item.ValueExpr, modeType, sc, depth)
		}
	case *hclsyntax.TupleConsExpr:
		for _, x := range e.Exprs {
			c.walkExpr(x, modeType, sc, depth)
		}
	case *hclsyntax.ParenthesesExpr:
		c.walkExpr(e.Expression, modeType, sc, depth)
	default:
		c.refuse(pos, "not a type constraint")
	}
}

// traversalString renders a traversal for messages: a.b["c"][0].
func traversalString(t hcl.Traversal) string {
	var b strings.Builder
	for _, step := range t {
		switch s := step.(type) {
		case hcl.TraverseRoot:
			b.WriteString(s.Name)
		case hcl.TraverseAttr:
			b.WriteString(".")
			b.WriteString(s.Name)
		case hcl.TraverseIndex:
			b.WriteString("[")
			b.WriteString(keyString(s.Key))
			b.WriteString("]")
		case hcl.TraverseSplat:
			b.WriteString("[*]")
		}
	}
	return b.String()
}

func keyString(k cty.Value) string {
	switch {
	case !k.IsKnown() || k.IsNull():
		return "?"
	case k.Type() == cty.String:
		return fmt.Sprintf("%q", k.AsString())
	case k.Type() == cty.Number:
		return k.AsBigFloat().Text('g', -1)
	}
	return "?"
}
