package plandiff

import (
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/internal/screen"
)

// MaxStringBytes bounds how much of one string value is shown; the rest is announced as "(… N more bytes)".
const MaxStringBytes = 4096

// maxFlagStringBytes bounds a string inside a risk flag's before and after; the diff below shows more of it.
const maxFlagStringBytes = 256

// maxElements bounds how many elements of one list or map a one-line value shows; the rest is announced.
const maxElements = 64

// maxValueBytes and maxFlagValueBytes bound one whole value (a block shown on one line) in the diff and in a
// risk flag; the rest is announced. The diff shows a block's leaves one by one wherever it can.
const (
	maxValueBytes     = 64 << 10
	maxFlagValueBytes = 2 << 10
)

// Path is an attribute path: object and map keys (string) and list indexes (int), as Terraform's
// replace_paths write them.
type Path []any

// identifier is a key that prints bare after a dot; any other key prints quoted in brackets.
var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)

// String renders p as spec[0].template[0].metadata[0].labels["app.kubernetes.io/name"], escaped to ASCII,
// with a marker naming any non-ASCII character of its keys. The empty path is "(whole resource)".
func (p Path) String() string {
	if len(p) == 0 {
		return "(whole resource)"
	}
	var b, raw strings.Builder
	for _, step := range p {
		switch s := step.(type) {
		case string:
			raw.WriteString(s)
			if identifier.MatchString(s) {
				if b.Len() > 0 {
					b.WriteByte('.')
				}
				b.WriteString(s)
			} else {
				b.WriteString("[" + screen.Quote(s) + "]")
			}
		case int:
			fmt.Fprintf(&b, "[%d]", s)
		case int64:
			fmt.Fprintf(&b, "[%d]", s)
		default:
			fmt.Fprintf(&b, "[%s]", screen.ASCII(fmt.Sprint(s)))
		}
	}
	return b.String() + screen.Marker(raw.String())
}

// hasPrefix reports whether q starts with p.
func (p Path) hasPrefix(q Path) bool {
	if len(q) > len(p) {
		return false
	}
	for i := range q {
		if !sameStep(p[i], q[i]) {
			return false
		}
	}
	return true
}

func sameStep(a, b any) bool {
	ai, aInt := stepIndex(a)
	bi, bInt := stepIndex(b)
	if aInt || bInt {
		return aInt && bInt && ai == bi
	}
	return a == b
}

func stepIndex(s any) (int64, bool) {
	switch x := s.(type) {
	case int:
		return int64(x), true
	case int64:
		return x, true
	}
	return 0, false
}

func (p Path) with(step any) Path {
	q := make(Path, len(p), len(p)+1)
	copy(q, p)
	return append(q, step)
}

// val is one side of a change at one node of the value tree: the value, whether the node exists at all,
// and the mirrors Terraform writes beside it.
type val struct {
	v       any
	present bool
	// sens is true when this node or one above it is sensitive; sensM is the sensitive mirror at this node.
	sens  bool
	sensM any
	// unk is the after_unknown mirror at this node (nil on the before side).
	unk any
}

func root(v, sensM, unk any) val {
	return val{v: v, present: v != nil, sens: sensM == true, sensM: sensM, unk: unk}
}

// hasValue is false for a node that is absent or null.
func (x val) hasValue() bool { return x.present && x.v != nil }

func (x val) unknown() bool { return x.unk == true }

func (x val) sensitive() bool { return x.sens || x.sensM == true }

// key is the child of an object or map node.
func (x val) key(k string) val {
	c := val{sens: x.sensitive()}
	if m, ok := x.v.(map[string]any); ok && x.present {
		c.v, c.present = m[k]
	}
	if m, ok := x.sensM.(map[string]any); ok {
		c.sensM = m[k]
	}
	if m, ok := x.unk.(map[string]any); ok {
		c.unk = m[k]
	}
	return c
}

// index is the child of a list node.
func (x val) index(i int) val {
	c := val{sens: x.sensitive()}
	if l, ok := x.v.([]any); ok && x.present && i < len(l) {
		c.v, c.present = l[i], true
	}
	if l, ok := x.sensM.([]any); ok && i < len(l) {
		c.sensM = l[i]
	}
	if l, ok := x.unk.([]any); ok && i < len(l) {
		c.unk = l[i]
	}
	return c
}

// at is the node at path below x (its mirrors, and whether it is sensitive, along with it).
func (x val) at(path Path) val {
	for _, step := range path {
		switch s := step.(type) {
		case string:
			x = x.key(s)
		case int:
			x = x.index(s)
		}
	}
	return x
}

// anyTrue reports whether a mirror marks this node or any node below it.
func anyTrue(m any) bool {
	switch x := m.(type) {
	case bool:
		return x
	case map[string]any:
		for _, e := range x {
			if anyTrue(e) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if anyTrue(e) {
				return true
			}
		}
	}
	return false
}

// same reports whether b and a are equal and a holds nothing unknown. Absent and null are the same.
func same(b, a val) bool {
	if anyTrue(a.unk) {
		return false
	}
	var bv, av any
	if b.present {
		bv = b.v
	}
	if a.present {
		av = a.v
	}
	return reflect.DeepEqual(bv, av)
}

// children are the keys (sorted) or the number of indexes of a node, on either side; the unknown mirror
// counts, since Terraform leaves a value that is known only after apply out of "after".
func children(b, a val) (keys []string, n int, isMap, isList bool) {
	seen := map[string]bool{}
	add := func(m any, onlyMarked bool) {
		mm, ok := m.(map[string]any)
		if !ok {
			return
		}
		isMap = true
		for k, e := range mm {
			if onlyMarked && !anyTrue(e) {
				continue
			}
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	count := func(l any, onlyMarked bool) {
		ll, ok := l.([]any)
		if !ok {
			return
		}
		isList = true
		if onlyMarked && !anyTrue(ll) {
			return
		}
		n = max(n, len(ll))
	}
	if b.present {
		add(b.v, false)
		count(b.v, false)
	}
	if a.present {
		add(a.v, false)
		count(a.v, false)
	}
	add(a.unk, true)
	count(a.unk, true)
	sort.Strings(keys)
	return keys, n, isMap, isList
}

// display renders one side of a node on one line: strings quoted and escaped to ASCII with a marker for
// non-ASCII characters, sensitive values masked, unknown values said so, containers compact.
func display(x val, maxString int) string {
	switch {
	case x.unknown():
		return "(known after apply)"
	case x.sensitive() && x.present:
		return "(sensitive)"
	case !x.present:
		return "(none)"
	}
	switch v := x.v.(type) {
	case nil:
		return "null"
	case string:
		return quote(v, maxString)
	case bool:
		return strconv.FormatBool(v)
	case int64:
		return strconv.FormatInt(v, 10)
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	case []any:
		_, n, _, _ := children(x, val{unk: x.unk})
		parts := make([]string, 0, min(n, maxElements))
		for i := range n {
			if i == maxElements {
				parts = append(parts, fmt.Sprintf("(… %d more elements)", n-i))
				break
			}
			parts = append(parts, display(x.index(i), maxString))
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case map[string]any:
		keys, _, _, _ := children(x, val{unk: x.unk})
		parts := make([]string, 0, min(len(keys), maxElements))
		for i, k := range keys {
			if i == maxElements {
				parts = append(parts, fmt.Sprintf("(… %d more elements)", len(keys)-i))
				break
			}
			parts = append(parts, Path{k}.String()+" = "+display(x.key(k), maxString))
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	return screen.ASCII(fmt.Sprint(x.v))
}

// show is display cut after maxTotal bytes, the cut said.
func show(x val, maxString, maxTotal int) string {
	s := display(x, maxString)
	if len(s) <= maxTotal {
		return s
	}
	return fmt.Sprintf("%s (… %d more bytes)", s[:maxTotal], len(s)-maxTotal)
}

// quote is a string value, escaped, cut after maxString bytes (at a character boundary) with the cut said.
func quote(s string, maxString int) string {
	if len(s) <= maxString {
		return screen.Quote(s) + screen.Marker(s)
	}
	cut := maxString
	for cut > 0 && cut < len(s) && s[cut]&0xc0 == 0x80 {
		cut--
	}
	return fmt.Sprintf("%s (… %d more bytes)%s", screen.Quote(s[:cut]), len(s)-cut, screen.Marker(s[:cut]))
}
