package preflight

import (
	"context"
	"fmt"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/internal/podsecurity"
)

// PodSecurityCheck names the check that the tools' target namespaces enforce Pod Security.
const PodSecurityCheck = "pod-security"

// podSecurityCheck is the pod-security check: the sandbox protects the node from the tool, Pod Security
// protects it from what the tool deploys, so every namespace a tool targets must enforce a level. A
// namespace enforcing none fails the check (a warning with allow); one that does not exist yet is a
// warning, since preflight runs before anything is installed.
func podSecurityCheck(ctx context.Context, namespaces podsecurity.NamespaceGetter, names []string, allow bool) Check {
	c := Check{Name: PodSecurityCheck}
	if len(names) == 0 {
		c.Status, c.Detail = Skip, "no --policy: the namespaces the tools deploy into are unknown"
		return c
	}
	rep, err := podsecurity.Check(ctx, namespaces, names)
	if err != nil {
		c.Status, c.Detail = Fail, err.Error()
		return c
	}
	var fixes, found []string
	for _, n := range rep.Namespaces {
		switch n.State {
		case podsecurity.Enforced:
			found = append(found, n.Name+" enforces "+n.Level)
		case podsecurity.Unenforced:
			found = append(found, n.Name+" ("+n.Problem()+")")
			fixes = append(fixes, n.LabelCommand())
		case podsecurity.Missing:
			found = append(found, n.Name+" does not exist yet")
			fixes = append(fixes, "kubectl create ns "+n.Name+" && "+n.LabelCommand())
		}
	}
	var unenforced []string
	for _, n := range rep.Unenforced() {
		unenforced = append(unenforced, n.Name)
	}
	missing := len(rep.Missing())
	c.Detail = "target namespaces: " + strings.Join(found, "; ")
	switch {
	case len(unenforced) > 0 && !allow:
		c.Status = Fail
		c.Detail = fmt.Sprintf("%s. No Pod Security level is enforced in %s: an approved apply could run a privileged or hostPath Pod there. %s",
			c.Detail, strings.Join(unenforced, ", "), podsecurity.LabelOnlyNote)
		fixes = append(fixes, "or, if a cluster-wide default or another admission controller keeps such Pods out, pass --allow-unenforced-namespaces")
	case len(unenforced) > 0:
		c.Status = Warn
		c.Detail = fmt.Sprintf("%s. No Pod Security level is enforced in %s, allowed by --allow-unenforced-namespaces: only what else the cluster runs keeps a privileged or hostPath Pod out. %s",
			c.Detail, strings.Join(unenforced, ", "), podsecurity.LabelOnlyNote)
	case missing > 0:
		c.Status = Warn
		c.Detail += ". Create them enforcing Pod Security before the tools run"
	default:
		c.Status = Pass
	}
	c.Fix = strings.Join(fixes, "; ")
	return c
}
