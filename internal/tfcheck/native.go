package tfcheck

import (
	"slices"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// checkNativeFile checks a file in Terraform's native syntax against rules.
func (c *checker) checkNativeFile(src []byte, rules *blockRule) {
	if pos, why, ok := nativeNesting(src, false, hcl.InitialPos); !ok {
		c.refuse(pos, "%s", why)
		return
	}
	f, diags := hclsyntax.ParseConfig(src, c.file, hcl.InitialPos)
	if diags.HasErrors() {
		c.diags(diags)
		return
	}
	body, ok := f.Body.(*hclsyntax.Body)
	if !ok {
		c.refuseFile("unexpected parse result")
		return
	}
	c.nativeBody(body, rules, nil)
}

// nativeBody checks a body against its rule.
func (c *checker) nativeBody(b *hclsyntax.Body, r *blockRule, sc scope) {
	attrs := make([]*hclsyntax.Attribute, 0, len(b.Attributes))
	for _, a := range b.Attributes {
		attrs = append(attrs, a)
	}
	slices.SortFunc(attrs, func(x, y *hclsyntax.Attribute) int { return x.NameRange.Start.Byte - y.NameRange.Start.Byte })
	for _, a := range attrs {
		pos := a.NameRange.Start
		if !c.count(pos) {
			return
		}
		if !isIdent(a.Name) {
			c.refuse(pos, "argument name %q is not a plain ASCII identifier", a.Name)
			continue
		}
		kind, ok := r.args[a.Name]
		switch {
		case ok:
		case r.anyArgs:
			kind = r.argsKind
		case r.open:
			kind = argExpr
		default:
			c.refuse(pos, "%s", refusedArgReason(r, a.Name))
			continue
		}
		before := len(c.problems)
		c.nativeArg(a.Expr, kind, sc)
		if r.value != nil && kind == argLiteral && len(c.problems) == before {
			// The value is a constant (checked above), so evaluating it runs nothing.
			v, diags := a.Expr.Value(nil)
			if diags.HasErrors() {
				c.diags(diags)
				continue
			}
			r.value(c, a.Name, v, pos)
		}
	}
	for _, blk := range b.Blocks {
		pos := blk.TypeRange.Start
		if !c.count(pos) {
			return
		}
		if !isIdent(blk.Type) {
			c.refuse(pos, "block type %q is not a plain ASCII identifier", blk.Type)
			continue
		}
		nr, known := r.blocks[blk.Type]
		if r.open && !known {
			if why := forbiddenInOpen(blk.Type); why != "" {
				c.refuse(pos, "%s", why)
				continue
			}
			if blk.Type == "dynamic" {
				c.nativeDynamic(blk, sc)
				continue
			}
			if len(blk.Labels) > 0 {
				c.refuse(pos, "%s block: nested blocks of a resource take no labels", blk.Type)
				continue
			}
			c.nativeBody(blk.Body, openRule, sc)
			continue
		}
		if !known {
			c.refuse(pos, "%s", refusedBlockReason(r, blk.Type))
			continue
		}
		if len(blk.Labels) != nr.labels {
			c.refuse(pos, "%s block takes %d label(s), not %d", blk.Type, nr.labels, len(blk.Labels))
			continue
		}
		if nr.label != nil {
			nr.label(c, blk.Labels, pos)
		}
		c.nativeBody(blk.Body, nr.rule, sc)
	}
}

// nativeDynamic checks a dynamic block of a resource: what it generates, its for_each, iterator
// and labels, and its content, in which the iterator is a bound name.
func (c *checker) nativeDynamic(blk *hclsyntax.Block, sc scope) {
	pos := blk.TypeRange.Start
	if len(blk.Labels) != 1 {
		c.refuse(pos, "dynamic block takes 1 label, not %d", len(blk.Labels))
		return
	}
	label := blk.Labels[0]
	if !isIdent(label) {
		c.refuse(pos, "dynamic block type %q is not a plain ASCII identifier", label)
		return
	}
	if why := forbiddenDynamic(label); why != "" {
		c.refuse(pos, "%s", why)
		return
	}
	iter := label
	if a, ok := blk.Body.Attributes["iterator"]; ok {
		t, ok := a.Expr.(*hclsyntax.ScopeTraversalExpr)
		if !ok || len(t.Traversal) != 1 || !isIdent(t.Traversal.RootName()) {
			c.refuse(a.NameRange.Start, "dynamic block iterator must be a plain name")
			return
		}
		iter = t.Traversal.RootName()
	}
	inner := sc.with(iter)
	for name, a := range blk.Body.Attributes {
		switch name {
		case "for_each":
			c.expr(a.Expr, modeExpr, sc)
		case "labels":
			c.expr(a.Expr, modeExpr, inner)
		case "iterator":
		default:
			c.refuse(a.NameRange.Start, "argument %s is not allowed in a dynamic block (for_each, iterator, labels, content)", name)
		}
	}
	for _, b := range blk.Body.Blocks {
		if b.Type != "content" || len(b.Labels) != 0 {
			c.refuse(b.TypeRange.Start, "%s block is not allowed in a dynamic block (only content)", b.Type)
			continue
		}
		c.nativeBody(b.Body, openRule, inner)
	}
}

// nativeArg checks an argument's expression as its kind requires.
func (c *checker) nativeArg(e hclsyntax.Expression, kind argKind, sc scope) {
	pos := e.Range().Start
	switch kind {
	case argExpr, argRefList:
		c.expr(e, modeExpr, sc)
	case argLiteral:
		c.expr(e, modeLiteral, sc)
	case argType:
		c.expr(e, modeType, sc)
	case argProviderRef:
		t, ok := e.(*hclsyntax.ScopeTraversalExpr)
		if !ok {
			c.refuse(pos, "provider must be kubernetes or kubernetes.ALIAS")
			return
		}
		c.providerRef(t.Traversal, pos)
	case argIgnoreChanges:
		if t, ok := e.(*hclsyntax.ScopeTraversalExpr); ok && len(t.Traversal) == 1 && t.Traversal.RootName() == "all" {
			return
		}
		tup, ok := e.(*hclsyntax.TupleConsExpr)
		if !ok {
			c.refuse(pos, "ignore_changes must be all or a list of attribute paths")
			return
		}
		for _, x := range tup.Exprs {
			if !c.count(pos) {
				return
			}
			if _, ok := x.(*hclsyntax.ScopeTraversalExpr); !ok {
				c.refuse(x.Range().Start, "ignore_changes must list attribute paths")
			}
		}
	case argAddress:
		t, ok := e.(*hclsyntax.ScopeTraversalExpr)
		if !ok {
			c.refuse(pos, "moved: from and to must be resource addresses")
			return
		}
		c.address(t.Traversal, pos)
	case argKeyword:
		t, ok := e.(*hclsyntax.ScopeTraversalExpr)
		if !ok || len(t.Traversal) != 1 || !isIdent(t.Traversal.RootName()) {
			c.refuse(pos, "must be a plain name")
		}
	}
}

// providerRef checks a resource's provider argument.
func (c *checker) providerRef(t hcl.Traversal, pos hcl.Pos) {
	ok := t.RootName() == "kubernetes" && len(t) <= 2
	if ok && len(t) == 2 {
		_, ok = t[1].(hcl.TraverseAttr)
	}
	if !ok {
		c.refuse(pos, "provider %s is not allowed: only kubernetes or kubernetes.ALIAS", traversalString(t))
	}
}

// address checks a moved block's resource address.
func (c *checker) address(t hcl.Traversal, pos hcl.Pos) {
	root := t.RootName()
	if root == "resource" && len(t) > 1 {
		if a, ok := t[1].(hcl.TraverseAttr); ok {
			root = a.Name
		}
	}
	if !resourceTypes[root] {
		c.refuse(pos, "moved address %s is not allowed: only addresses of allowed kubernetes resources", traversalString(t))
	}
}
