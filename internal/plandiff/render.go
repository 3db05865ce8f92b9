package plandiff

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strings"
)

// WriteText writes the text form of the report for a terminal: the risk flags first, then the counts, then
// each resource with its action and every changed attribute. Nothing is left out; long values are bounded
// with the cut said ("(… N more bytes)"). Every line is escaped (see Report).
func (r *Report) WriteText(w io.Writer) error {
	bw := bufio.NewWriter(w)
	r.writeFlags(bw)
	bw.WriteString("\n")
	r.writeChanges(bw)
	return bw.Flush()
}

// WriteFlags writes the risk flags alone, as WriteText begins.
func (r *Report) WriteFlags(w io.Writer) error {
	bw := bufio.NewWriter(w)
	r.writeFlags(bw)
	return bw.Flush()
}

// WriteChanges writes the counts and the resources with their attributes, as WriteText ends.
func (r *Report) WriteChanges(w io.Writer) error {
	bw := bufio.NewWriter(w)
	r.writeChanges(bw)
	return bw.Flush()
}

func (r *Report) writeFlags(w *bufio.Writer) {
	if len(r.Flags) == 0 {
		fmt.Fprintln(w, "Risk flags: none. Checked: deletions, replacements, RBAC and Ingress resources; privileged, host")
		fmt.Fprintln(w, "  namespaces, host paths and ports, root user or group, capabilities added or not dropped, service-account")
		fmt.Fprintln(w, "  tokens and names, Secrets in env or volumes, images, commands and args, terminals and stdin, ENV, BASH_ENV,")
		fmt.Fprintln(w, "  HOME, PATH and LD_* variables and env from ConfigMaps, executable volume files, mount paths, probe")
		fmt.Fprintln(w, "  and hook hosts, security profiles, node placement and priority, DNS and hosts entries, shared process")
		fmt.Fprintln(w, "  namespaces, Service selectors, pods joining a Service of the workspace, pod labels changed or known only after")
		fmt.Fprintln(w, "  apply, annotations known only after apply,")
		fmt.Fprintln(w, "  exposed Services, look-alike names, values too long to show whole, ConfigMap data binary or known only after")
		fmt.Fprintln(w, "  apply, ConfigMap data a workload of the plan reads.")
		return
	}
	var names []string
	for _, f := range r.Flags {
		if n := strings.ToUpper(f.Rule); !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	fmt.Fprintf(w, "!! RISK FLAGS (%d): %s\n", len(r.Flags), strings.Join(names, ", "))
	fmt.Fprintln(w, "!! These are security-relevant changes of this plan. Read every one before you approve.")
	for _, f := range r.Flags {
		path := f.Path
		if path == "" {
			path = "(whole resource)"
		}
		fmt.Fprintf(w, "!! RISK %s  %s  %s: %s -> %s  -- %s\n", strings.ToUpper(f.Rule), f.Address, path, f.Before, f.After, f.Why)
	}
}

func (r *Report) writeChanges(w *bufio.Writer) {
	s := r.Summary
	fmt.Fprintf(w, "  %d to add, %d to change, %d to destroy (%d of them replacements)\n", s.Add, s.Change, s.Destroy, s.Replace)
	if len(r.Resources) == 0 {
		fmt.Fprintln(w, "  no resource changes")
		return
	}
	flagged := map[string]bool{}
	for _, f := range r.Flags {
		flagged[f.Address] = true
	}
	for _, res := range r.Resources {
		mark := "  "
		if flagged[res.Address] {
			mark = "!!"
		}
		fmt.Fprintf(w, "\n  %s %-16s %s", mark, strings.Join(res.Actions, ","), res.Address)
		if res.Mode != "" && res.Mode != "managed" {
			fmt.Fprintf(w, "  (%s)", res.Mode)
		}
		if res.Object != "" {
			fmt.Fprintf(w, "  object %s", res.Object)
		}
		if res.MovedFrom != "" {
			fmt.Fprintf(w, "  (moved from %s)", res.MovedFrom)
		}
		if len(res.ReplacePaths) > 0 {
			fmt.Fprintf(w, "  (replaced because of %s)", strings.Join(res.ReplacePaths, ", "))
		}
		fmt.Fprintln(w)
		if len(res.Attributes) == 0 {
			fmt.Fprintln(w, "         (no attribute differs)")
		}
		create := slices.Contains(res.Actions, "create") && !slices.Contains(res.Actions, "delete")
		remove := slices.Contains(res.Actions, "delete") && !slices.Contains(res.Actions, "create")
		for _, a := range res.Attributes {
			mark := "       "
			if a.Flagged {
				mark = "    !! "
			}
			switch {
			case create:
				fmt.Fprintf(w, "%s+ %s = %s\n", mark, a.Path, a.After)
			case remove:
				fmt.Fprintf(w, "%s- %s = %s\n", mark, a.Path, a.Before)
			default:
				sign := "~"
				switch a.Change {
				case "add":
					sign = "+"
				case "remove":
					sign = "-"
				}
				fmt.Fprintf(w, "%s%s %s: %s -> %s\n", mark, sign, a.Path, a.Before, a.After)
			}
			for _, l := range a.Lines {
				fmt.Fprintf(w, "%s    | %s\n", mark, l)
			}
		}
	}
}
