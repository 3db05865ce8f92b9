package tfcheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// errJSON marks JSON that the checker's parser does not accept.
var errJSON = errors.New("invalid JSON")

type jkind int

const (
	jObject jkind = iota
	jArray
	jString
	jNumber
	jBool
	jNull
)

// jvalue is a JSON value as written: object members keep their order, and each value knows where
// it starts. Unlike a map, it cannot hide a repeated key (the parser refuses those).
type jvalue struct {
	kind    jkind
	pos     hcl.Pos
	str     string // the decoded string, or the number as written
	b       bool
	members []jmember
	elems   []*jvalue
}

type jmember struct {
	key    string // decoded: \u escapes are resolved, so comparisons see what Terraform sees
	keyPos hcl.Pos
	val    *jvalue
}

// jsonParser builds a jvalue tree from json.Decoder's token stream, so it never recurses deeper
// than MaxDepth and never builds more than MaxItems values.
type jsonParser struct {
	src       []byte
	dec       *json.Decoder
	lineStart []int
	items     int
}

// parseJSON parses one JSON document. It refuses duplicate object keys, nesting deeper than
// MaxDepth, more than MaxItems values and anything after the document.
func parseJSON(src []byte) (*jvalue, hcl.Pos, error) {
	p := &jsonParser{src: src, dec: json.NewDecoder(bytes.NewReader(src))}
	p.dec.UseNumber()
	p.lineStart = append(p.lineStart, 0)
	for i, b := range src {
		if b == '\n' {
			p.lineStart = append(p.lineStart, i+1)
		}
	}
	tok, off, err := p.next()
	if err != nil {
		return nil, p.pos(off), err
	}
	v, pos, err := p.value(tok, off, 0)
	if err != nil {
		return nil, pos, err
	}
	if _, off, err := p.next(); err != io.EOF {
		return nil, p.pos(off), fmt.Errorf("%w: data after the JSON document", errJSON)
	}
	return v, hcl.Pos{}, nil
}

// pos turns a byte offset into a line and column (columns count bytes).
func (p *jsonParser) pos(off int) hcl.Pos {
	line := sort.Search(len(p.lineStart), func(i int) bool { return p.lineStart[i] > off }) - 1
	if line < 0 {
		line = 0
	}
	return hcl.Pos{Line: line + 1, Column: off - p.lineStart[line] + 1, Byte: off}
}

// next reads a token and the offset where it starts.
func (p *jsonParser) next() (json.Token, int, error) {
	off := int(p.dec.InputOffset())
	tok, err := p.dec.Token()
	for off < len(p.src) {
		switch p.src[off] {
		case ' ', '\t', '\r', '\n', ',', ':':
			off++
			continue
		}
		break
	}
	if err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, int(se.Offset), fmt.Errorf("%w: %v", errJSON, err)
		}
		if err == io.EOF {
			return nil, off, io.EOF
		}
		return nil, off, fmt.Errorf("%w: %v", errJSON, err)
	}
	return tok, off, nil
}

func (p *jsonParser) value(tok json.Token, off int, depth int) (*jvalue, hcl.Pos, error) {
	pos := p.pos(off)
	p.items++
	if p.items > MaxItems {
		return nil, pos, fmt.Errorf("%w: more than %d values", errJSON, MaxItems)
	}
	switch t := tok.(type) {
	case string:
		return &jvalue{kind: jString, pos: pos, str: t}, pos, nil
	case json.Number:
		return &jvalue{kind: jNumber, pos: pos, str: string(t)}, pos, nil
	case bool:
		return &jvalue{kind: jBool, pos: pos, b: t}, pos, nil
	case nil:
		return &jvalue{kind: jNull, pos: pos}, pos, nil
	case json.Delim:
		if depth >= MaxDepth {
			return nil, pos, fmt.Errorf("%w: nested more than %d deep", errJSON, MaxDepth)
		}
		switch t {
		case '{':
			v := &jvalue{kind: jObject, pos: pos}
			seen := map[string]bool{}
			for {
				tok, koff, err := p.next()
				if err != nil {
					return nil, p.pos(koff), eofIsError(err)
				}
				if d, ok := tok.(json.Delim); ok && d == '}' {
					return v, pos, nil
				}
				key, ok := tok.(string)
				if !ok {
					return nil, p.pos(koff), fmt.Errorf("%w: object key is not a string", errJSON)
				}
				if seen[key] {
					return nil, p.pos(koff), fmt.Errorf("%w: duplicate key %q (Terraform would see both; a map would keep one)", errJSON, key)
				}
				seen[key] = true
				tok, voff, err := p.next()
				if err != nil {
					return nil, p.pos(voff), eofIsError(err)
				}
				val, vpos, err := p.value(tok, voff, depth+1)
				if err != nil {
					return nil, vpos, err
				}
				v.members = append(v.members, jmember{key: key, keyPos: p.pos(koff), val: val})
			}
		case '[':
			v := &jvalue{kind: jArray, pos: pos}
			for {
				tok, eoff, err := p.next()
				if err != nil {
					return nil, p.pos(eoff), eofIsError(err)
				}
				if d, ok := tok.(json.Delim); ok && d == ']' {
					return v, pos, nil
				}
				val, vpos, err := p.value(tok, eoff, depth+1)
				if err != nil {
					return nil, vpos, err
				}
				v.elems = append(v.elems, val)
			}
		}
	}
	return nil, pos, fmt.Errorf("%w: unexpected token %v", errJSON, tok)
}

func eofIsError(err error) error {
	if err == io.EOF {
		return fmt.Errorf("%w: unexpected end of file", errJSON)
	}
	return err
}

// checkJSONFile checks a file in Terraform's JSON syntax against rules.
func (c *checker) checkJSONFile(src []byte, rules *blockRule) {
	root, pos, err := parseJSON(src)
	if err != nil {
		c.refuse(pos, "invalid syntax: %v", err)
		return
	}
	if root.kind != jObject && root.kind != jArray {
		c.refuse(root.pos, "the root of a JSON configuration must be an object or an array of objects")
		return
	}
	c.jsonBody(root, rules, nil)
}

// bodyMembers flattens a body: an object, an array of objects (merged in order) or null (empty),
// as HCL's JSON syntax does.
func (c *checker) bodyMembers(v *jvalue) ([]jmember, bool) {
	switch v.kind {
	case jNull:
		return nil, true
	case jObject:
		return v.members, true
	case jArray:
		var ms []jmember
		for _, e := range v.elems {
			if e.kind != jObject {
				c.refuse(e.pos, "A JSON object is required here, to define arguments and blocks")
				return nil, false
			}
			ms = append(ms, e.members...)
		}
		return ms, true
	}
	c.refuse(v.pos, "a JSON object or an array of objects is required here, to define arguments and blocks")
	return nil, false
}

// jsonBody checks a body against its rule. In a JSON body, whether a key is an argument or a block
// depends on the schema; where the provider defines the schema (open rules) the checker cannot
// know, so it checks the value both ways (jsonOpen).
func (c *checker) jsonBody(v *jvalue, r *blockRule, sc scope) {
	members, ok := c.bodyMembers(v)
	if !ok {
		return
	}
	args := map[string]bool{}
	for _, m := range members {
		pos := m.keyPos
		if !c.count(pos) {
			return
		}
		key := m.key
		if key == "//" {
			// Terraform ignores "//" in a body, as a comment; an object expression would evaluate
			// it. Checking it as if it were code costs nothing and settles the question.
			c.jsonOpen(m.val, sc)
			continue
		}
		kind, isArg := r.args[key]
		nr, isBlock := r.blocks[key]
		if !isArg && !isBlock && r.anyArgs {
			isArg, kind = true, r.argsKind
		}
		switch {
		case isArg:
			if !isIdent(key) {
				c.refuse(pos, "argument name %q is not a plain ASCII identifier", key)
				continue
			}
			if args[key] {
				c.refuse(pos, "argument %s is set twice", key)
				continue
			}
			args[key] = true
			before := len(c.problems)
			c.jsonArg(m.val, kind, sc)
			if r.value != nil && kind == argLiteral && len(c.problems) == before {
				r.value(c, key, jsonToCty(m.val), pos)
			}
		case isBlock:
			c.jsonBlocks(m.val, nil, nr.labels, pos, func(labels []string, body *jvalue, lpos hcl.Pos) {
				if nr.label != nil {
					nr.label(c, labels, lpos)
				}
				c.jsonBody(body, nr.rule, sc)
			})
		case r.open:
			if why := forbiddenInOpen(key); why != "" {
				c.refuse(pos, "%s", why)
				continue
			}
			if key == "dynamic" && (m.val.kind == jObject || m.val.kind == jArray) {
				c.jsonDynamic(m.val, pos, sc)
				continue
			}
			c.template(key, pos, modeExpr, sc)
			c.jsonOpen(m.val, sc)
		default:
			c.refuse(pos, "%s", refusedKeyReason(r, key))
		}
	}
}

// refusedKeyReason says why a key of a JSON body is refused: as a block where the key names one.
func refusedKeyReason(r *blockRule, key string) string {
	switch {
	case r == configRules, key == "provisioner", key == "connection", key == "dynamic",
		r == terraformRule && (key == "backend" || key == "cloud" || key == "experiments" || key == "provider_meta"),
		r == providerRule && (key == "exec" || key == "experiments"):
		return refusedBlockReason(r, key)
	}
	return refusedArgReason(r, key)
}

// jsonBlocks unpacks the blocks of one key: labels levels of objects (or arrays of objects), then
// for each block a body (an object, or an array of bodies for several blocks; null for none).
func (c *checker) jsonBlocks(v *jvalue, labels []string, need int, pos hcl.Pos, fn func([]string, *jvalue, hcl.Pos)) {
	if c.full() {
		return
	}
	if need > 0 {
		members, ok := c.bodyMembers(v)
		if !ok {
			return
		}
		if len(members) == 0 {
			c.refuse(v.pos, "missing block label")
			return
		}
		for _, m := range members {
			if !c.count(m.keyPos) {
				return
			}
			// "//" is no comment here: at a label level it is a label.
			c.jsonBlocks(m.val, append(labels[:len(labels):len(labels)], m.key), need-1, m.keyPos, fn)
		}
		return
	}
	switch v.kind {
	case jNull:
	case jObject:
		fn(labels, v, pos)
	case jArray:
		for _, e := range v.elems {
			fn(labels, e, pos)
		}
	default:
		c.refuse(v.pos, "a JSON object or an array of objects is required here, for the block's contents")
	}
}

// jsonDynamic checks the dynamic blocks of a resource body written in JSON.
func (c *checker) jsonDynamic(v *jvalue, pos hcl.Pos, sc scope) {
	c.jsonBlocks(v, nil, 1, pos, func(labels []string, body *jvalue, lpos hcl.Pos) {
		label := labels[0]
		if !isIdent(label) {
			c.refuse(lpos, "dynamic block type %q is not a plain ASCII identifier", label)
			return
		}
		if why := forbiddenDynamic(label); why != "" {
			c.refuse(lpos, "%s", why)
			return
		}
		members, ok := c.bodyMembers(body)
		if !ok {
			return
		}
		iter := label
		for _, m := range members {
			if m.key == "iterator" {
				if m.val.kind != jString || !isIdent(m.val.str) {
					c.refuse(m.keyPos, "dynamic block iterator must be a plain name")
					return
				}
				iter = m.val.str
			}
		}
		inner := sc.with(iter)
		for _, m := range members {
			switch m.key {
			case "iterator":
			case "for_each":
				c.jsonExpr(m.val, modeExpr, sc)
			case "labels":
				c.jsonExpr(m.val, modeExpr, inner)
			case "//":
				c.jsonOpen(m.val, sc)
			case "content":
				c.jsonBlocks(m.val, nil, 0, m.keyPos, func(_ []string, cb *jvalue, _ hcl.Pos) {
					c.jsonBody(cb, openRule, inner)
				})
			default:
				c.refuse(m.keyPos, "%s is not allowed in a dynamic block (for_each, iterator, labels, content)", m.key)
			}
		}
	})
}

// jsonOpen checks a value of a resource body whose schema the provider defines: it may be an
// argument (an expression: strings are templates, object keys too) or nested blocks (object keys
// are block types or arguments). It is checked as both.
func (c *checker) jsonOpen(v *jvalue, sc scope) {
	if c.full() || !c.count(v.pos) {
		return
	}
	switch v.kind {
	case jString:
		c.template(v.str, v.pos, modeExpr, sc)
	case jArray:
		for _, e := range v.elems {
			c.jsonOpen(e, sc)
		}
	case jObject:
		c.jsonBody(v, openRule, sc)
	}
}

// jsonArg checks an argument's JSON value as its kind requires.
func (c *checker) jsonArg(v *jvalue, kind argKind, sc scope) {
	switch kind {
	case argExpr:
		c.jsonExpr(v, modeExpr, sc)
	case argLiteral:
		c.jsonExpr(v, modeLiteral, sc)
	case argType:
		if v.kind != jString {
			c.refuse(v.pos, "a type constraint must be a string in JSON syntax")
			return
		}
		if e := c.parseNativeExpr(v.str, v.pos); e != nil {
			c.expr(e, modeType, sc)
		}
	case argProviderRef:
		if t := c.jsonTraversal(v); t != nil {
			c.providerRef(t, v.pos)
		}
	case argIgnoreChanges:
		if v.kind == jString {
			if t := c.jsonTraversal(v); t != nil && (len(t) != 1 || t.RootName() != "all") {
				c.refuse(v.pos, "ignore_changes must be all or a list of attribute paths")
			}
			return
		}
		if v.kind != jArray {
			c.refuse(v.pos, "ignore_changes must be all or a list of attribute paths")
			return
		}
		for _, e := range v.elems {
			c.jsonTraversal(e)
		}
	case argAddress:
		if t := c.jsonTraversal(v); t != nil {
			c.address(t, v.pos)
		}
	case argKeyword:
		if v.kind != jString || !isIdent(v.str) {
			c.refuse(v.pos, "must be a plain name")
		}
	case argRefList:
		// Terraform (configs.unwrapJSONRefExpr) parses each string as a native expression.
		if v.kind != jArray {
			c.refuse(v.pos, "replace_triggered_by must be a list of references")
			return
		}
		for _, e := range v.elems {
			if !c.count(e.pos) {
				return
			}
			if e.kind != jString {
				c.refuse(e.pos, "replace_triggered_by must be a list of references")
				continue
			}
			if x := c.parseNativeExpr(e.str, e.pos); x != nil {
				c.expr(x, modeExpr, sc)
			}
		}
	}
}

// jsonTraversal parses a JSON string that Terraform reads as a traversal (provider = "a.b").
func (c *checker) jsonTraversal(v *jvalue) hcl.Traversal {
	if !c.count(v.pos) {
		return nil
	}
	if v.kind != jString {
		c.refuse(v.pos, "a reference must be a string in JSON syntax")
		return nil
	}
	if pos, why, ok := nativeNesting([]byte(v.str), false, v.pos); !ok {
		c.refuse(pos, "%s", why)
		return nil
	}
	t, diags := hclsyntax.ParseTraversalAbs([]byte(v.str), c.file, v.pos)
	if diags.HasErrors() {
		c.diags(diags)
		return nil
	}
	return t
}

// jsonExpr checks a JSON value that Terraform evaluates as an expression: every string is a
// template, and so is every object key.
func (c *checker) jsonExpr(v *jvalue, mode exprMode, sc scope) {
	if c.full() || !c.count(v.pos) {
		return
	}
	switch v.kind {
	case jString:
		c.template(v.str, v.pos, mode, sc)
	case jArray:
		for _, e := range v.elems {
			c.jsonExpr(e, mode, sc)
		}
	case jObject:
		for _, m := range v.members {
			c.template(m.key, m.keyPos, mode, sc)
			c.jsonExpr(m.val, mode, sc)
		}
	}
}

// template checks a JSON string as the template Terraform parses it as.
func (c *checker) template(s string, pos hcl.Pos, mode exprMode, sc scope) {
	if !bytes.Contains([]byte(s), []byte("${")) && !bytes.Contains([]byte(s), []byte("%{")) {
		// No interpolation and no directive: a literal string. Terraform parses it as a template
		// all the same, one literal part a line, in time that grows with the square of the lines.
		if strings.Count(s, "\n") >= maxTemplateParts {
			c.refuse(pos, "a string of more than %d lines: the parser's work grows with the square of that", maxTemplateParts)
		}
		return
	}
	if p, why, ok := nativeNesting([]byte(s), true, pos); !ok {
		c.refuse(p, "%s", why)
		return
	}
	e, diags := hclsyntax.ParseTemplate([]byte(s), c.file, pos)
	if diags.HasErrors() {
		c.diags(diags)
		return
	}
	c.expr(e, mode, sc)
}

// parseNativeExpr parses a JSON string that Terraform reads as a native expression.
func (c *checker) parseNativeExpr(s string, pos hcl.Pos) hclsyntax.Expression {
	if p, why, ok := nativeNesting([]byte(s), false, pos); !ok {
		c.refuse(p, "%s", why)
		return nil
	}
	e, diags := hclsyntax.ParseExpression([]byte(s), c.file, pos)
	if diags.HasErrors() {
		c.diags(diags)
		return nil
	}
	return e
}

// jsonToCty turns a constant JSON value into the value Terraform reads when it evaluates without
// a context (strings verbatim).
func jsonToCty(v *jvalue) cty.Value {
	switch v.kind {
	case jString:
		return cty.StringVal(v.str)
	case jNumber:
		n, err := cty.ParseNumberVal(v.str)
		if err != nil {
			return cty.DynamicVal
		}
		return n
	case jBool:
		return cty.BoolVal(v.b)
	case jArray:
		if len(v.elems) == 0 {
			return cty.EmptyTupleVal
		}
		vals := make([]cty.Value, len(v.elems))
		for i, e := range v.elems {
			vals[i] = jsonToCty(e)
		}
		return cty.TupleVal(vals)
	case jObject:
		if len(v.members) == 0 {
			return cty.EmptyObjectVal
		}
		attrs := make(map[string]cty.Value, len(v.members))
		for _, m := range v.members {
			attrs[m.key] = jsonToCty(m.val)
		}
		return cty.ObjectVal(attrs)
	}
	return cty.NullVal(cty.DynamicPseudoType)
}
