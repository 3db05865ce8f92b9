package plandiff

import (
	"strings"

	"github.com/agent-sandbox/agent-sandbox/internal/screen"
)

// Report is what an approver reads to decide on a plan: the security-relevant changes first, then every
// attribute of every resource the plan changes, before and after. It is the JSON form of the approval
// screen (`-o json`) as well as the source of its text form (WriteText), so the two say the same.
//
// Every string in a Report is already escaped for a terminal, as the screen shows it (package screen):
// control characters and non-ASCII characters as \u escapes, followed by a marker naming the non-ASCII
// ones, " [non-ASCII: U+0435 CYRILLIC SMALL LETTER IE]". Values are display forms: strings quoted, numbers
// and booleans bare, "null", "(none)" where the attribute does not exist on that side, "(known after
// apply)" and "(sensitive)".
type Report struct {
	Summary Summary `json:"summary"`
	// Flags are the security-relevant changes, in plan order.
	Flags []Flag `json:"flags"`
	// Resources are the resources the plan changes (no-ops left out), in Terraform's order.
	Resources []Resource `json:"resources"`
}

// Summary counts the managed resources a plan changes, as `terraform plan` does: a replacement counts as
// one to add and one to destroy.
type Summary struct {
	Add     int `json:"add"`
	Change  int `json:"change"`
	Destroy int `json:"destroy"`
	Replace int `json:"replace"`
}

// Resource is one changed resource and every attribute that differs.
type Resource struct {
	Address string `json:"address"`
	Mode    string `json:"mode"`
	Type    string `json:"type"`
	// Actions are Terraform's, e.g. ["update"] or ["delete","create"].
	Actions      []string `json:"actions"`
	ActionReason string   `json:"action_reason,omitempty"`
	// ReplacePaths are the attribute paths that force a replacement.
	ReplacePaths []string `json:"replace_paths,omitempty"`
	// Object is the Kubernetes object the resource is, namespace/name from its metadata (after, or before
	// for a delete): an update shows no unchanged attribute, so without it the screen would name only the
	// workspace's address, which the workspace chooses freely.
	Object string `json:"object,omitempty"`
	// MovedFrom is the address a moved block renamed the resource from.
	MovedFrom string `json:"moved_from,omitempty"`
	// Attributes differ between before and after: for a create every attribute that has a value after,
	// for a delete every attribute that had one before.
	Attributes []Attribute `json:"attributes"`
}

// Attribute is one attribute (a leaf of the value tree, or a whole value where one side has no tree) that
// differs between before and after.
type Attribute struct {
	Path string `json:"path"`
	// Change is "add" (no value before), "remove" (no value after) or "update".
	Change string `json:"change"`
	Before string `json:"before"`
	After  string `json:"after"`
	// Flagged is true when a risk flag covers this attribute.
	Flagged bool `json:"flagged,omitempty"`
	// Lines is the line-by-line diff of a string the change sets that holds several lines (a script, a
	// configuration file): each entry "  ", "- " or "+ " and the line escaped, long unchanged runs folded.
	Lines []string `json:"lines,omitempty"`

	path Path
}

// Diff computes the report of a plan: every change but no-ops, every differing attribute, every risk flag.
func Diff(p *Plan) *Report {
	r := &Report{Flags: []Flag{}, Resources: []Resource{}}
	services := existingServices(p)
	uses := configUses(p)
	for i := range p.Changes {
		c := &p.Changes[i]
		if c.IsNoOp() {
			continue
		}
		r.Summary.count(c)
		res := Resource{
			Address: screen.ASCII(c.Address), Mode: screen.ASCII(c.Mode), Type: screen.ASCII(c.Type),
			ActionReason: screen.ASCII(c.ActionReason), Actions: make([]string, len(c.Actions)),
		}
		for j, a := range c.Actions {
			res.Actions[j] = screen.ASCII(a)
		}
		for _, rp := range c.ReplacePaths {
			res.ReplacePaths = append(res.ReplacePaths, Path(rp).String())
		}
		res.Object, res.MovedFrom = objectName(c), screen.ASCII(c.PreviousAddress)
		d := &differ{}
		before := root(c.Before, c.BeforeSensitive, nil)
		after := root(c.After, c.AfterSensitive, c.AfterUnknown)
		d.walk(nil, before, after)
		flags := append(flagsOf(c, before, after), joinsServices(services, c, screen.ASCII(c.Address))...)
		flags = append(flags, consumedConfig(uses, c, screen.ASCII(c.Address))...)
		if strings.Contains(res.Object, Unknown) {
			// Found in review (2026-12-07): a ConfigMap named "${substr(timestamp(), 0, 0)}web-conf".
			flags = append(flags, Flag{Rule: "unknown_name", Address: res.Address, Path: "metadata[0]", Before: "(none)", After: res.Object,
				Why: "which object the plan writes is known only after apply: it may be one a workload already reads", KnownAfterApply: true,
				path: Path{"metadata", 0}})
		}
		for k := range d.out {
			for _, f := range flags {
				if f.path != nil && d.out[k].path.hasPrefix(f.path) {
					d.out[k].Flagged = true
				}
			}
		}
		res.Attributes = d.out
		if res.Attributes == nil {
			res.Attributes = []Attribute{}
		}
		r.Flags = append(r.Flags, flags...)
		r.Resources = append(r.Resources, res)
	}
	sortFlags(r.Flags)
	return r
}

func (s *Summary) count(c *Change) {
	if c.Mode != "" && c.Mode != "managed" {
		return
	}
	switch {
	case c.IsReplace():
		s.Add++
		s.Destroy++
		s.Replace++
	case c.Has("create"):
		s.Add++
	case c.Has("delete"):
		s.Destroy++
	case c.Has("update"):
		s.Change++
	}
}

// differ walks before and after side by side and collects the attributes that differ.
type differ struct {
	out []Attribute
}

func (d *differ) walk(path Path, b, a val) {
	if a.unknown() {
		d.unknown(path, b)
		return
	}
	// A sensitive value is compared whole and never taken apart: even its keys could tell.
	if b.sensitive() || a.sensitive() {
		if !same(b, a) {
			d.emit(path, b, a)
		}
		return
	}
	keys, n, isMap, isList := children(b, a)
	_, bMap := b.v.(map[string]any)
	_, aMap := a.v.(map[string]any)
	_, bList := b.v.([]any)
	_, aList := a.v.([]any)
	bNone, aNone := !b.hasValue(), !a.hasValue()
	switch {
	case isMap && !isList && (bMap || bNone) && (aMap || aNone):
		if len(keys) == 0 {
			// An empty map or block list against null, on a key both sides have: {} -> null.
			if b.present && a.present && !same(b, a) {
				d.emit(path, b, a)
			}
			return
		}
		for _, k := range keys {
			d.walk(path.with(k), b.key(k), a.key(k))
		}
	case isList && !isMap && (bList || bNone) && (aList || aNone):
		if n == 0 {
			if b.present && a.present && !same(b, a) {
				d.emit(path, b, a)
			}
			return
		}
		// Index by index: an element added or removed at the end shows as added or removed; one inserted
		// in the middle shows every later element as changed, which is noisy but never hides anything.
		for i := range n {
			d.walk(path.with(i), b.index(i), a.index(i))
		}
	default:
		if !same(b, a) {
			d.emit(path, b, a)
		}
	}
}

// unknown records that the value at path is known only after apply: each value it had before, or the
// node itself when it had none.
func (d *differ) unknown(path Path, b val) {
	start := len(d.out)
	d.leaves(path, b)
	if len(d.out) == start {
		d.out = append(d.out, Attribute{Path: path.String(), Change: "update", Before: show(b, MaxStringBytes, maxValueBytes), After: display(val{unk: true}, 0), path: path})
	}
}

func (d *differ) leaves(path Path, b val) {
	if !b.hasValue() {
		return
	}
	if !b.sensitive() {
		keys, n, isMap, isList := children(b, val{})
		switch {
		case isMap:
			for _, k := range keys {
				d.leaves(path.with(k), b.key(k))
			}
			return
		case isList:
			for i := range n {
				d.leaves(path.with(i), b.index(i))
			}
			return
		}
	}
	d.out = append(d.out, Attribute{Path: path.String(), Change: "update", Before: show(b, MaxStringBytes, maxValueBytes), After: display(val{unk: true}, 0), path: path})
}

func (d *differ) emit(path Path, b, a val) {
	change := "update"
	switch {
	case !b.hasValue() && a.hasValue():
		change = "add"
	case b.hasValue() && !a.hasValue():
		change = "remove"
	}
	d.out = append(d.out, Attribute{Path: path.String(), Change: change, Before: show(b, MaxStringBytes, maxValueBytes), After: show(a, MaxStringBytes, maxValueBytes),
		Lines: multiLine(b, a), path: path})
}

// objectName is namespace/name of the Kubernetes object a change is, from its metadata after the change (before
// it for a delete), each part escaped, "(known after apply)" where the plan does not know it.
func objectName(c *Change) string {
	v, unknown := c.After, c.AfterUnknown
	if v == nil {
		v, unknown = c.Before, nil
	}
	meta := firstObject(mapValue(v)["metadata"])
	umeta := firstObject(mapValue(unknown)["metadata"])
	if meta == nil && umeta == nil {
		return ""
	}
	part := func(k string) string {
		if u, _ := umeta[k].(bool); u {
			return Unknown
		}
		s, _ := meta[k].(string)
		return screen.ASCII(s)
	}
	ns, name := part("namespace"), part("name")
	if name == "" && ns == "" {
		return ""
	}
	if ns == "" {
		return name
	}
	return ns + "/" + name
}
