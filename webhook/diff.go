package webhook

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Mismatch is the first place where an admitted object differs from what the policy renders.
type Mismatch struct {
	// Path is the field, for example spec.template.spec.containers[0].livenessProbe.
	Path string
	// Got and Want describe the two sides; "" means the field is absent on that side.
	Got, Want string
}

func (m *Mismatch) String() string {
	switch {
	case m.Want == "":
		return fmt.Sprintf("%s is set (%s), but the policy renders nothing there", m.Path, m.Got)
	case m.Got == "":
		return fmt.Sprintf("%s is missing; the policy renders %s", m.Path, m.Want)
	default:
		return fmt.Sprintf("%s is %s; the policy renders %s", m.Path, m.Got, m.Want)
	}
}

// diff compares two JSON-like trees (map[string]any, []any, string, bool, int64, float64, nil: what
// sigs.k8s.io/json and runtime.DefaultUnstructuredConverter produce) and returns the first difference in a
// deterministic order, or nil when they are equal. It is an allowlist comparison: every key of got must
// exist in want with an equal value, so a field the policy does not render — including one that a future
// Kubernetes version adds and this program has never heard of — is a difference.
//
// Nearly every object the webhook compares is equal to its rendering, so the comparison runs first in the
// maps' own order, spelling out no path; only when that finds a difference does it run again, in sorted
// order, to name the first one. Both runs are the one comparison below: the order does not change whether
// a difference exists.
func diff(path string, got, want any) *Mismatch {
	var steps [16]step
	d := differ{root: path, path: steps[:0]}
	if d.diff(got, want) == nil {
		return nil
	}
	d = differ{ordered: true, root: path, path: steps[:0]}
	return d.diff(got, want)
}

// differ is one run of the comparison: unordered, to find whether there is a difference, or ordered, to
// find the first. path is where it is below root; it is spelled out only for a difference.
type differ struct {
	ordered bool
	root    string
	path    []step
}

// step is a key of an object, or an index of a list when key is "" and list is set.
type step struct {
	key   string
	index int
	list  bool
}

// at spells out the path where the comparison is, followed by the key k (if not "").
func (d *differ) at(k string) string {
	p := d.root
	for _, s := range d.path {
		if s.list {
			p += "[" + strconv.Itoa(s.index) + "]"
		} else {
			p = join(p, s.key)
		}
	}
	if k != "" {
		p = join(p, k)
	}
	return p
}

func (d *differ) diff(got, want any) *Mismatch {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return &Mismatch{Path: d.at(""), Got: describe(got), Want: describe(want)}
		}
		if !d.ordered {
			for k, gv := range g {
				if m := d.gotMember(k, gv, w); m != nil {
					return m
				}
			}
			for k, wv := range w {
				if m := d.wantMember(k, wv, g); m != nil {
					return m
				}
			}
			return nil
		}
		for _, k := range sortedKeys(g) {
			if m := d.gotMember(k, g[k], w); m != nil {
				return m
			}
		}
		for _, k := range sortedKeys(w) {
			if m := d.wantMember(k, w[k], g); m != nil {
				return m
			}
		}
		return nil
	case []any:
		g, ok := got.([]any)
		if !ok {
			if got == nil && len(w) == 0 {
				return nil
			}
			return &Mismatch{Path: d.at(""), Got: describe(got), Want: describe(want)}
		}
		for i := range max(len(g), len(w)) {
			d.path = append(d.path, step{index: i, list: true})
			switch {
			case i >= len(w):
				return &Mismatch{Path: d.at(""), Got: describe(g[i])}
			case i >= len(g):
				return &Mismatch{Path: d.at(""), Want: describe(w[i])}
			}
			if m := d.diff(g[i], w[i]); m != nil {
				return m
			}
			d.path = d.path[:len(d.path)-1]
		}
		return nil
	default:
		if scalarEqual(got, want) {
			return nil
		}
		if want == nil && isEmpty(got) {
			return nil
		}
		return &Mismatch{Path: d.at(""), Got: describe(got), Want: describe(want)}
	}
}

// gotMember compares the member k of an admitted object with the rendering w: every key of got must exist
// in want with an equal value.
func (d *differ) gotMember(k string, gv any, w map[string]any) *Mismatch {
	wv, ok := w[k]
	if !ok {
		if isEmpty(gv) {
			// An empty object, list or null carries nothing: {"securityContext": {}} and no
			// securityContext are the same to every consumer of the spec.
			return nil
		}
		return &Mismatch{Path: d.at(k), Got: describe(gv)}
	}
	d.path = append(d.path, step{key: k})
	if m := d.diff(gv, wv); m != nil {
		return m
	}
	d.path = d.path[:len(d.path)-1]
	return nil
}

// wantMember reports a member k of the rendering that the admitted object g lacks.
func (d *differ) wantMember(k string, wv any, g map[string]any) *Mismatch {
	if _, ok := g[k]; !ok && !isEmpty(wv) {
		return &Mismatch{Path: d.at(k), Want: describe(wv)}
	}
	return nil
}

// scalarEqual compares leaves; numbers compare by value whatever their Go type (int64 from the API
// server's JSON, int64 or float64 from the converter).
func scalarEqual(a, b any) bool {
	if af, ok := number(a); ok {
		bf, ok := number(b)
		return ok && af == bf
	}
	return a == b
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case int:
		return float64(n), true
	case int32:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}

func isEmpty(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case map[string]any:
		return len(x) == 0
	case []any:
		return len(x) == 0
	}
	return false
}

// describe renders a value for a denial message: short, on one line.
func describe(v any) string {
	var s string
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		s = strconv.Quote(x)
	case map[string]any:
		keys := sortedKeys(x)
		s = "{" + strings.Join(keys, ", ") + "}"
	case []any:
		s = fmt.Sprintf("a list of %d", len(x))
	default:
		s = fmt.Sprint(x)
	}
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return s
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	if strings.ContainsAny(key, "./") {
		return path + "[" + strconv.Quote(key) + "]"
	}
	return path + "." + key
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
