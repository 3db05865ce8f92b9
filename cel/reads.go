package cel

import (
	"slices"

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

// SameRenderedFields reports whether two Jobs agree exactly — the same members, the same values of the same
// Go types — in every field a rule may read when the rules read only rendered fields
// (Program.ReadsOnlyRenderedFields): apiVersion, kind, the spec except its selector and pod template, the
// pod template's spec and its metadata's annotations. Rules that read nothing else see the same input for
// both, so they give both the same verdict. The objects are JSON-like trees (map[string]any, []any, string,
// bool, int64, float64, nil); a value of any other type is never the same as anything.
func SameRenderedFields(a, b map[string]any) bool {
	if !sameMember(a, b, "apiVersion") || !sameMember(a, b, "kind") {
		return false
	}
	as, aok := a["spec"].(map[string]any)
	bs, bok := b["spec"].(map[string]any)
	if !aok || !bok {
		return !aok && !bok && sameMember(a, b, "spec")
	}
	if !sameExcept(as, bs, "selector", "template") {
		return false
	}
	at, aok := as["template"].(map[string]any)
	bt, bok := bs["template"].(map[string]any)
	if !aok || !bok {
		return !aok && !bok && sameMember(as, bs, "template")
	}
	// podMetadata is the template's metadata when it is an object, and empty otherwise.
	am, _ := at["metadata"].(map[string]any)
	bm, _ := bt["metadata"].(map[string]any)
	return sameMember(at, bt, "spec") && sameMember(am, bm, "annotations")
}

// sameMember reports whether a and b both lack key or both have the same value there.
func sameMember(a, b map[string]any, key string) bool {
	av, aok := a[key]
	bv, bok := b[key]
	return aok == bok && same(av, bv)
}

// sameExcept compares two objects member by member, leaving out the members named.
func sameExcept(a, b map[string]any, except ...string) bool {
	skipped := 0
	for k, av := range a {
		if slices.Contains(except, k) {
			skipped++
			continue
		}
		bv, ok := b[k]
		if !ok || !same(av, bv) {
			return false
		}
	}
	for _, k := range except {
		if _, ok := b[k]; ok {
			skipped--
		}
	}
	return len(a) == len(b)+skipped
}

// same compares two JSON-like values exactly: numbers of different Go types differ (CEL tells an int from a
// double), and so do null, an empty object and an empty list.
func same(a, b any) bool {
	switch x := a.(type) {
	case nil:
		return b == nil
	case string:
		y, ok := b.(string)
		return ok && x == y
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case int64:
		y, ok := b.(int64)
		return ok && x == y
	case float64:
		y, ok := b.(float64)
		return ok && x == y
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, xv := range x {
			if yv, ok := y[k]; !ok || !same(xv, yv) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !same(x[i], y[i]) {
				return false
			}
		}
		return true
	}
	return false
}
