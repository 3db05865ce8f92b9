package plandiff

import (
	"encoding/json"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Unknown is what a value Terraform knows only after apply reads as in a RuleView. It is a string, so a rule
// written as an allowlist — `privileged == false`, `host_path.size() == 0`, `run_as_user > 0` — refuses it
// (false, or an evaluation error, which refuses too), and a plan cannot hide a setting behind a value
// computed at apply.
const Unknown = "(known after apply)"

// RuleView is what the policy's plan rules see of one resource change: cel.PlanProgram.Evaluate binds each
// member to one of the rules' variables. Values are copies; attributes whose value is null are left out, and
// unknown values are Unknown.
type RuleView struct {
	// Change holds address, module_address, mode, type, name, provider_name, actions, action_reason, before
	// and after (empty maps when the resource has no such value).
	Change map[string]any
	// PodSpecs are the pod specs in After: every element of a "spec" list, at any depth, whose "container" or
	// "init_container" is a list of objects (Deployment, StatefulSet, DaemonSet, Job and CronJob templates,
	// Pods; not the deprecated template { container } form of a replication controller).
	PodSpecs []any
	// PodMetadata are the metadata objects beside those pod specs (the template's or the Pod's own).
	PodMetadata []any
	// Containers are the container and init_container entries of PodSpecs; BeforeContainers the same in
	// Before.
	Containers       []any
	BeforeContainers []any
	// Volumes are the volume entries of PodSpecs, BeforeVolumes the same in Before, each without its empty
	// values ("", false, 0, [] and {}, at any depth): the provider writes an attribute the configuration
	// leaves unset as its zero value in the state and as null in a plan's after, so that only a value that
	// means something compares.
	Volumes       []any
	BeforeVolumes []any
	// PodUnknowns are the paths, inside the pod specs of After and their metadata, of every value known only
	// after apply (a whole pod spec hidden behind one: "(pod spec)"; a whole metadata block: "(pod
	// metadata)"), but for those the provider computes because the configuration leaves them unset
	// (providerSets, metadataComputed). A plan whose workloads are not known at plan time cannot be judged at
	// plan time.
	PodUnknowns []any
	// LongValues are the paths in After of the strings the approval screen cannot show whole (longer than
	// MaxStringBytes: it shows their first MaxStringBytes bytes and the count of the rest) that the change
	// sets: new, or not the same as before at that path. What the screen cuts — a script's last lines — the
	// approver never reads; on an update, a change past the cut shows before and after alike.
	LongValues []any
	// HiddenValues are the paths in After of every value marked sensitive (the workspace's sensitive() or a
	// sensitive variable; "(resource)" when the whole value is): the approval screen shows each only as
	// "(sensitive)", so the approver cannot judge it, in a pod spec or anywhere else.
	HiddenValues []any
}

// View builds the RuleView of a change.
func View(c *Change) RuleView {
	before := ruleValue(c.Before, nil)
	after := ruleValue(c.After, c.AfterUnknown)
	actions := make([]any, len(c.Actions))
	for i, a := range c.Actions {
		actions[i] = a
	}
	v := RuleView{Change: map[string]any{
		"address": c.Address, "module_address": c.ModuleAddress, "mode": c.Mode, "type": c.Type, "name": c.Name,
		"provider_name": c.ProviderName, "actions": actions, "action_reason": c.ActionReason,
		"before": objectOrEmpty(before), "after": objectOrEmpty(after),
	}}
	var afterPods, beforePods []pod
	findPods(after, nil, &afterPods)
	findPods(before, nil, &beforePods)
	v.PodSpecs, v.PodMetadata, v.Containers = []any{}, []any{}, []any{}
	v.PodUnknowns = []any{}
	for _, p := range afterPods {
		switch {
		case p.poisoned:
			v.PodUnknowns = append(v.PodUnknowns, "(pod spec)")
		default:
			cfg, static := configAt(c.Config, p.path)
			unknownPaths(p.spec, "", func(path string) bool { return static && providerSets(cfg, path) }, &v.PodUnknowns)
		}
		switch {
		case p.metaUnknown:
			v.PodUnknowns = append(v.PodUnknowns, "(pod metadata)")
		case p.meta != nil:
			unknownPaths(p.meta, "metadata", func(path string) bool { return metadataComputed[path] }, &v.PodUnknowns)
		}
		// A value marked sensitive (the workspace's sensitive() or a sensitive variable) is judged by the
		// rules but never shown on the approval screen: the approver could not judge it.
		hiddenPaths(c.AfterSensitive, p.path, "", &v.PodUnknowns)
		if len(p.path) > 0 {
			metaPath := append(slices.Clip(p.path[:len(p.path)-2]), "metadata")
			hiddenPaths(c.AfterSensitive, metaPath, "metadata", &v.PodUnknowns)
		}
		v.PodSpecs = append(v.PodSpecs, p.spec)
		if p.meta != nil {
			v.PodMetadata = append(v.PodMetadata, p.meta)
		}
		v.Containers = append(v.Containers, p.containers()...)
	}
	v.HiddenValues = []any{}
	if c.AfterSensitive == true {
		v.HiddenValues = append(v.HiddenValues, "(resource) (sensitive)")
	} else {
		hiddenPaths(c.AfterSensitive, nil, "", &v.HiddenValues)
	}
	v.LongValues = []any{}
	for _, p := range LongStrings(c) {
		v.LongValues = append(v.LongValues, p.String())
	}
	v.BeforeContainers = []any{}
	for _, p := range beforePods {
		v.BeforeContainers = append(v.BeforeContainers, p.containers()...)
	}
	v.Volumes, v.BeforeVolumes = volumesOf(afterPods), volumesOf(beforePods)
	return v
}

func objectOrEmpty(v any) map[string]any {
	if m, ok := v.(map[string]any); ok {
		return m
	}
	return map[string]any{}
}

// ruleValue copies v without null attributes, with Unknown wherever unknown (a mirror of v, as
// after_unknown is) says true.
func ruleValue(v, unknown any) any {
	if u, ok := unknown.(bool); ok && u {
		return Unknown
	}
	switch x := v.(type) {
	case map[string]any:
		um, _ := unknown.(map[string]any)
		out := make(map[string]any, len(x))
		for k, e := range x {
			if rv := ruleValue(e, um[k]); rv != nil {
				out[k] = rv
			}
		}
		// An attribute that is null in after but unknown in after_unknown is known only after apply.
		for k, u := range um {
			if b, ok := u.(bool); ok && b {
				out[k] = Unknown
			}
		}
		return out
	case []any:
		ul, _ := unknown.([]any)
		out := make([]any, len(x))
		for i, e := range x {
			var u any
			if i < len(ul) {
				u = ul[i]
			}
			out[i] = ruleValue(e, u)
		}
		return out
	case nil:
		if um, ok := unknown.(map[string]any); ok && len(um) > 0 {
			return ruleValue(map[string]any{}, um)
		}
		return nil
	}
	return v
}

type pod struct {
	spec, meta map[string]any
	poisoned   bool
	// metaUnknown: the metadata beside the spec is known only after apply as a whole (a dynamic block).
	metaUnknown bool
	// path leads from the resource's value to spec (keys and list indexes).
	path []any
}

// providerComputed are the pod-spec attributes that provider hashicorp/kubernetes 1.13.4 leaves to the API
// server when the configuration does not set them, so they are known only after apply in every create
// (container paths without their index). Such an unknown is not counted in PodUnknowns when the resource's
// configuration shows it unset (providerSets): none of them then grants a workload anything the plan rules
// allow only when known (a service account's token is refused by plan-no-token-automount and
// plan-allowed-volumes whatever the account). One the configuration sets to a value computed at apply — a
// service account or a node named by "${substr(timestamp(), 0, 0)}name" — is counted: the approver would
// read "(known after apply)" for the identity or the node the workload gets.
var providerComputed = map[string]bool{
	"hostname": true, "image_pull_secrets": true, "node_name": true, "service_account_name": true,
	"container.termination_message_policy": true, "init_container.termination_message_policy": true,
}

// metadataComputed are the attributes of a pod template's metadata that provider 1.13.4 always plans as
// known only after apply on a create; whatever the configuration says, the API server fills them in
// (labels and annotations are not among them).
var metadataComputed = map[string]bool{
	"metadata.generation": true, "metadata.name": true, "metadata.resource_version": true,
	"metadata.self_link": true, "metadata.uid": true,
}

// providerSets reports whether the unknown value at path (inside a pod spec whose configuration is cfg) is
// one the provider computes because the configuration leaves it unset: a providerComputed attribute whose
// block the configuration holds statically (not in a dynamic block, which the plan's configuration leaves
// out) without the attribute.
func providerSets(cfg any, path string) bool {
	if !providerComputed[stripIndexes(path)] {
		return false
	}
	block, attr := cfg, path
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		var ok bool
		if block, ok = configAt(cfg, pathElems(path[:i])); !ok {
			return false
		}
		attr = path[i+1:]
	}
	m, ok := block.(map[string]any)
	if !ok {
		return false
	}
	_, set := m[attr]
	return !set
}

// hiddenPaths appends "<path> (sensitive)" for every value of the sensitive mirror below at (a pod spec
// or its metadata) that is marked sensitive, the whole block too when it or a block above it is.
func hiddenPaths(mirror any, at []any, prefix string, out *[]any) {
	for _, el := range at {
		if mirror == true {
			break
		}
		var ok bool
		if mirror, ok = configAt(mirror, []any{el}); !ok {
			return
		}
	}
	var walk func(m any, path string)
	walk = func(m any, path string) {
		switch x := m.(type) {
		case bool:
			if x {
				if path == "" {
					path = "(pod spec)"
				}
				*out = append(*out, path+" (sensitive)")
			}
		case map[string]any:
			for _, k := range slices.Sorted(maps.Keys(x)) {
				p := k
				if path != "" {
					p = path + "." + k
				}
				walk(x[k], p)
			}
		case []any:
			for i, e := range x {
				walk(e, path+"["+itoa(i)+"]")
			}
		}
	}
	walk(mirror, prefix)
}

// configAt follows path (keys and list indexes of a resource's value) through the resource's configuration,
// whose blocks are lists of objects in the same order for blocks written out (not dynamic); ok is false
// where the configuration does not hold that block.
func configAt(cfg any, path []any) (any, bool) {
	for _, el := range path {
		switch k := el.(type) {
		case string:
			m, ok := cfg.(map[string]any)
			if !ok {
				return nil, false
			}
			if cfg, ok = m[k]; !ok {
				return nil, false
			}
		case int:
			l, ok := cfg.([]any)
			if !ok || k >= len(l) {
				return nil, false
			}
			cfg = l[k]
		}
	}
	return cfg, cfg != nil
}

// pathElems turns "container[1].security_context[0]" into its keys and indexes.
func pathElems(path string) []any {
	var out []any
	for _, part := range strings.Split(path, ".") {
		name, rest, _ := strings.Cut(part, "[")
		out = append(out, name)
		for rest != "" {
			idx, after, _ := strings.Cut(rest, "]")
			n, err := strconv.Atoi(idx)
			if err != nil {
				return nil
			}
			out = append(out, n)
			rest = strings.TrimPrefix(after, "[")
		}
	}
	return out
}

// unknownPaths appends the path of every Unknown value in v, except those exempt says the provider computes.
func unknownPaths(v any, path string, exempt func(path string) bool, out *[]any) {
	switch x := v.(type) {
	case string:
		if x == Unknown && !exempt(path) {
			*out = append(*out, path)
		}
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sortStrings(keys)
		for _, k := range keys {
			p := k
			if path != "" {
				p = path + "." + k
			}
			unknownPaths(x[k], p, exempt, out)
		}
	case []any:
		for i, e := range x {
			unknownPaths(e, path+"["+itoa(i)+"]", exempt, out)
		}
	}
}

func (p pod) containers() []any {
	var out []any
	for _, k := range []string{"init_container", "container"} {
		switch l := p.spec[k].(type) {
		case []any:
			out = append(out, l...)
		case string:
			// Unknown: every rule over containers fails to evaluate on it, so the change is refused.
			out = append(out, l)
		}
	}
	return out
}

// volumesOf lists the volume entries of pods without their empty values (RuleView.Volumes). A pod spec whose
// volumes are known only after apply contributes Unknown.
func volumesOf(pods []pod) []any {
	out := []any{}
	for _, p := range pods {
		switch l := p.spec["volume"].(type) {
		case []any:
			for _, v := range l {
				out = append(out, withoutEmpty(v))
			}
		case string:
			out = append(out, l)
		}
	}
	return out
}

// withoutEmpty copies v without the map entries whose value is empty ("", false, 0, [] or {}, once
// emptied itself). List elements are kept, emptied or not: their positions mean something.
func withoutEmpty(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			if e = withoutEmpty(e); !isEmptyValue(e) {
				out[k] = e
			}
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = withoutEmpty(e)
		}
		return out
	}
	return v
}

func isEmptyValue(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case string:
		return x == ""
	case bool:
		return !x
	case json.Number:
		f, err := x.Float64()
		return err == nil && f == 0
	case float64:
		return x == 0
	case int:
		return x == 0
	case int64:
		return x == 0
	case map[string]any:
		return len(x) == 0
	case []any:
		return len(x) == 0
	}
	return false
}

// poisoned stands for a pod spec whose contents are known only after apply.
var poisoned = map[string]any{"container": Unknown}

// findPods walks v and collects every pod spec: an object with a "container" or "init_container" list of
// objects. Its metadata is the "metadata" block of the object whose "spec" holds it. path is v's path.
func findPods(v any, path []any, out *[]pod) {
	at := func(el ...any) []any { return append(slices.Clip(path), el...) }
	switch x := v.(type) {
	case map[string]any:
		// A block that could hold a pod spec but is known only after apply (a dynamic block over a value
		// computed at apply) hides what it holds: it counts as a pod spec that no rule can pass.
		for _, k := range []string{"spec", "template", "job_template", "container", "init_container"} {
			if x[k] == Unknown {
				*out = append(*out, pod{spec: poisoned, poisoned: true})
			}
		}
		if specs, ok := x["spec"].([]any); ok {
			meta, metaUnknown := firstObject(x["metadata"]), x["metadata"] == Unknown
			for i, s := range specs {
				if sm, ok := s.(map[string]any); ok && isPodSpec(sm) {
					*out = append(*out, pod{spec: sm, meta: meta, metaUnknown: metaUnknown, path: at("spec", i)})
				}
			}
		}
		for _, k := range slices.Sorted(maps.Keys(x)) {
			e := x[k]
			if k == "spec" {
				// Pod specs directly under spec were taken above; look deeper inside them and their siblings.
				if specs, ok := e.([]any); ok {
					for i, s := range specs {
						if sm, ok := s.(map[string]any); ok && isPodSpec(sm) {
							for _, ik := range slices.Sorted(maps.Keys(sm)) {
								findPods(sm[ik], at("spec", i, ik), out)
							}
							continue
						}
						findPods(s, at("spec", i), out)
					}
					continue
				}
			}
			findPods(e, at(k), out)
		}
	case []any:
		for i, e := range x {
			findPods(e, at(i), out)
		}
	}
}

func sortStrings(s []string) { sort.Strings(s) }

// stripIndexes turns container[0].image into container.image.
func stripIndexes(path string) string {
	b := make([]byte, 0, len(path))
	skip := false
	for i := 0; i < len(path); i++ {
		switch c := path[i]; {
		case c == '[':
			skip = true
		case c == ']':
			skip = false
		case !skip:
			b = append(b, c)
		}
	}
	return string(b)
}

func itoa(i int) string { return strconv.Itoa(i) }

func isPodSpec(m map[string]any) bool {
	for _, k := range []string{"container", "init_container"} {
		if m[k] == Unknown {
			return true
		}
		if l, ok := m[k].([]any); ok && len(l) > 0 {
			if _, ok := l[0].(map[string]any); ok {
				return true
			}
		}
	}
	return false
}

func firstObject(v any) map[string]any {
	if l, ok := v.([]any); ok && len(l) > 0 {
		m, _ := l[0].(map[string]any)
		return m
	}
	return nil
}

// LongStrings are the paths in a change's After of the strings longer than MaxStringBytes that the change
// sets (new, or different from Before at the same path), in a stable order. The approval screen shows only
// the first MaxStringBytes bytes of each.
func LongStrings(c *Change) []Path {
	var out []Path
	var walk func(path Path, v any)
	walk = func(path Path, v any) {
		switch x := v.(type) {
		case string:
			if len(x) <= MaxStringBytes {
				return
			}
			if b, ok := configAt(c.Before, path); ok && b == x {
				return
			}
			out = append(out, path)
		case map[string]any:
			for _, k := range slices.Sorted(maps.Keys(x)) {
				walk(path.with(k), x[k])
			}
		case []any:
			for i, e := range x {
				walk(path.with(i), e)
			}
		}
	}
	walk(nil, c.After)
	return out
}
