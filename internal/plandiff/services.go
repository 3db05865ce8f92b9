package plandiff

import (
	"fmt"
	"maps"
	"slices"

	"github.com/agent-sandbox/agent-sandbox/internal/screen"
)

// service is a Service the plan leaves in place (unchanged, updated, or replaced): its address, namespace and
// the labels its selector asks for.
type service struct {
	address, namespace string
	selector           map[string]any
}

// existingServices are the Services of the workspace that exist before the plan and still do after it, with a
// selector known at plan time. A Service the plan creates shows its own selector (flag selector); these are
// the ones whose traffic a new workload can take without the Service changing at all.
func existingServices(p *Plan) []service {
	var out []service
	for i := range p.Changes {
		c := &p.Changes[i]
		if c.Type != "kubernetes_service" || (c.Mode != "" && c.Mode != "managed") || c.Before == nil || c.After == nil {
			continue
		}
		spec := firstObject(mapValue(c.After)["spec"])
		sel, _ := spec["selector"].(map[string]any)
		if len(sel) == 0 {
			continue
		}
		out = append(out, service{address: screen.ASCII(c.Address), namespace: namespaceOf(c.After), selector: sel})
	}
	return out
}

// joinsServices flags the pods of a change whose labels an existing Service selects and did not select
// before: the Service sends them its traffic (a share of every request, its users' cookies and tokens) though
// neither the Service nor anything it shows changes. A workload that served the Service before is not flagged.
func joinsServices(services []service, c *Change, addr string) []Flag {
	if len(services) == 0 || c.After == nil || (c.Mode != "" && c.Mode != "managed") {
		return nil
	}
	var pods []pod
	findPods(c.After, nil, &pods)
	ns := namespaceOf(c.After)
	var out []Flag
	for _, p := range pods {
		if p.poisoned || len(p.path) < 2 {
			continue
		}
		labelsPath := append(slices.Clone(p.path[:len(p.path)-2]), "metadata", 0, "labels")
		labels, _ := p.meta["labels"].(map[string]any)
		beforeLabels := map[string]any{}
		if c.Before != nil {
			if l, ok := configAt(c.Before, labelsPath); ok {
				beforeLabels, _ = l.(map[string]any)
			}
		}
		for _, s := range services {
			if s.namespace != ns || !selects(s.selector, labels) || selects(s.selector, beforeLabels) {
				continue
			}
			out = append(out, Flag{Rule: "selector", Address: addr, Path: Path(labelsPath).String(),
				Before: "(not selected)", After: "selected by " + s.address,
				Why:  fmt.Sprintf("%s sends its traffic to these pods too: they join its endpoints, and get a share of every request to it", s.address),
				path: Path(labelsPath)})
		}
	}
	return out
}

// selects reports whether a selector picks a pod with these labels: every key it names with the same value.
func selects(selector, labels map[string]any) bool {
	if len(selector) == 0 {
		return false
	}
	for _, k := range slices.Sorted(maps.Keys(selector)) {
		if v, ok := labels[k]; !ok || v != selector[k] {
			return false
		}
	}
	return true
}

// namespaceOf is a resource's metadata namespace, "default" when it names none.
func namespaceOf(v any) string {
	ns, _ := firstObject(mapValue(v)["metadata"])["namespace"].(string)
	if ns == "" {
		return "default"
	}
	return ns
}

func mapValue(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}
