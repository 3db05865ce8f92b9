package cel

import (
	"github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/types"
)

// readsOnlyRendered reports whether expr reads the admitted object only through fields that are the same
// for every object of one rendering of a tool call: the pod spec, the containers, the settings, kind and
// operation, the pod template's annotations, the Job's apiVersion and kind, and its spec except the
// selector and the pod template's metadata. It does not read the object's metadata (name, UID, labels,
// timestamps), which the API server and the request make different for every Job.
//
// The analysis is conservative: a use it does not recognise — the whole object passed to a function, an
// index that is not a constant string, a comprehension variable that shadows a rule variable — counts as
// reading everything.
func readsOnlyRendered(e ast.Expr) bool {
	switch e.Kind() {
	case ast.IdentKind:
		switch e.AsIdent() {
		case VarObject, VarPodMetadata:
			return false // used whole
		}
		return true
	case ast.SelectKind, ast.CallKind:
		if root, path, ok := chain(e); ok && (root == VarObject || root == VarPodMetadata) {
			return allowedPath(root, path)
		}
		if e.Kind() == ast.SelectKind {
			return readsOnlyRendered(e.AsSelect().Operand())
		}
		c := e.AsCall()
		if c.IsMemberFunction() && !readsOnlyRendered(c.Target()) {
			return false
		}
		for _, a := range c.Args() {
			if !readsOnlyRendered(a) {
				return false
			}
		}
		return true
	case ast.ComprehensionKind:
		c := e.AsComprehension()
		for _, v := range []string{c.IterVar(), c.IterVar2(), c.AccuVar()} {
			if v == VarObject || v == VarPodMetadata {
				return false
			}
		}
		return readsOnlyRendered(c.IterRange()) && readsOnlyRendered(c.AccuInit()) &&
			readsOnlyRendered(c.LoopCondition()) && readsOnlyRendered(c.LoopStep()) && readsOnlyRendered(c.Result())
	case ast.ListKind:
		for _, x := range e.AsList().Elements() {
			if !readsOnlyRendered(x) {
				return false
			}
		}
		return true
	case ast.MapKind:
		for _, x := range e.AsMap().Entries() {
			me := x.AsMapEntry()
			if !readsOnlyRendered(me.Key()) || !readsOnlyRendered(me.Value()) {
				return false
			}
		}
		return true
	case ast.LiteralKind:
		return true
	}
	return false
}

// chain follows field selections (a.b, has(a.b), a.?b, a["b"] with a constant key) down to an identifier.
func chain(e ast.Expr) (root string, path []string, ok bool) {
	var rev []string
	for {
		switch e.Kind() {
		case ast.IdentKind:
			for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
				rev[i], rev[j] = rev[j], rev[i]
			}
			return e.AsIdent(), rev, true
		case ast.SelectKind:
			s := e.AsSelect()
			rev = append(rev, s.FieldName())
			e = s.Operand()
		case ast.CallKind:
			c := e.AsCall()
			args := c.Args()
			if c.IsMemberFunction() || len(args) != 2 || (c.FunctionName() != "_?._" && c.FunctionName() != "_[_]" && c.FunctionName() != "_[?_]") {
				return "", nil, false
			}
			if args[1].Kind() != ast.LiteralKind {
				return "", nil, false
			}
			key, isString := args[1].AsLiteral().(types.String)
			if !isString {
				return "", nil, false
			}
			rev = append(rev, string(key))
			e = args[0]
		default:
			return "", nil, false
		}
	}
}

func allowedPath(root string, path []string) bool {
	if root == VarPodMetadata {
		return len(path) >= 1 && path[0] == "annotations"
	}
	if len(path) == 0 {
		return false
	}
	switch path[0] {
	case "apiVersion", "kind":
		return true
	case "spec":
		if len(path) < 2 {
			return false
		}
		switch path[1] {
		case "selector":
			return false
		case "template":
			return len(path) >= 3 && path[2] == "spec"
		}
		return true
	}
	return false
}
