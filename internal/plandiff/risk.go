package plandiff

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/internal/screen"
)

// Flag is one security-relevant change: a resource deleted or replaced, an RBAC or Ingress resource
// changed, or an attribute the plan sets to a risky value (or to a value known only after apply).
type Flag struct {
	// Rule names what was found, e.g. "privileged" or "host_path".
	Rule    string `json:"rule"`
	Address string `json:"address"`
	// Path is the attribute; empty when the flag is about the whole resource.
	Path   string `json:"path,omitempty"`
	Before string `json:"before"`
	After  string `json:"after"`
	// Why says in a few words why it matters.
	Why string `json:"why"`
	// KnownAfterApply is true when the plan does not say what the value will be.
	KnownAfterApply bool `json:"known_after_apply,omitempty"`

	path Path
}

// rule is one attribute check. It matches an attribute by its key, anywhere in the value tree, so that
// init containers, the pod templates of every workload kind and places a future provider adds are covered.
type rule struct {
	id  string
	key string
	// under, when set, is a key that must appear above the attribute (capabilities above add).
	under string
	// resource, when set, limits the rule to one resource type.
	resource string
	why      string
	// risky reports whether the value the plan sets is a risky one; it is asked only when the value changes.
	risky func(val) bool
	// valueOnly rules are about what a known value looks like: a value known only after apply is not
	// flagged by them (every other rule flags it).
	valueOnly bool
	// prefix makes key a prefix of the attribute's key (annotation names that end in a container's name).
	prefix bool
	// nullIsRisky rules flag an attribute the plan leaves null where it was not: the provider applies a
	// default that is the risk (run_as_user left out is 0, root).
	nullIsRisky bool
	// unknownOnly rules flag an attribute only when its value as a whole is known only after apply (a
	// dynamic metadata block over a value computed at apply); risky is not asked.
	unknownOnly bool
	// updateOnly rules flag a known value only when the change updates the resource in place: on a create
	// or a replacement every value is new, and the change is flagged or shown as such.
	updateOnly bool
}

// rules are the attribute checks. The kubernetes provider (hashicorp/kubernetes v1.13.4) writes 0 for an
// integer left unset, so run_as_user = 0 appears whenever a security_context block omits it: that is root,
// and it is flagged.
var rules = []rule{
	{id: "privileged", key: "privileged", why: "a privileged container has full access to the node", risky: isTrue},
	{id: "allow_privilege_escalation", key: "allow_privilege_escalation", why: "a process can gain more privileges than its parent, through setuid binaries or file capabilities", risky: isTrue},
	{id: "capabilities_add", key: "add", under: "capabilities", why: "adds Linux capabilities to the container", risky: nonEmpty},
	{id: "host_path", key: "host_path", why: "mounts a directory of the node into the pod", risky: nonEmpty},
	{id: "host_network", key: "host_network", why: "the pod uses the node's network namespace", risky: isTrue},
	{id: "host_pid", key: "host_pid", why: "the pod sees and can signal every process of the node", risky: isTrue},
	{id: "host_ipc", key: "host_ipc", why: "the pod shares the node's IPC namespace", risky: isTrue},
	{id: "host_port", key: "host_port", why: "opens a port on the node itself", risky: nonZero},
	{id: "run_as_root", key: "run_as_user", why: "runs as root, UID 0; the provider plans a run_as_user left out as null and applies it as 0", risky: isZeroOrNull, nullIsRisky: true},
	{id: "root_group", key: "run_as_group", why: "runs in the root group, GID 0, which owns and may write much of an image's files; the provider plans a run_as_group left out as null and applies it as 0", risky: isZeroOrNull, nullIsRisky: true},
	{id: "root_group", key: "fs_group", why: "the pod's volumes are given to the root group, GID 0; the provider plans an fs_group left out as null and applies it as 0", risky: isZeroOrNull, nullIsRisky: true},
	{id: "root_group", key: "supplemental_groups", why: "adds the root group, GID 0, to the pod's processes", risky: hasZero},
	{id: "run_as_non_root_off", key: "run_as_non_root", why: "the kubelet no longer refuses to start a container that runs as root", risky: isFalse},
	{id: "automount_service_account_token", key: "automount_service_account_token", why: "mounts a Kubernetes API token into the pod", risky: isTrue},
	{id: "service_account", key: "service_account_name", why: "the pod runs with another Kubernetes identity", risky: always},
	{id: "image", key: "image", why: "the container runs different code", risky: always},
	{id: "command", key: "command", why: "the container runs a different program", risky: always},
	{id: "args", key: "args", why: "the container's program gets different arguments", risky: always},
	{id: "interactive", key: "tty", why: "a terminal makes a shell interactive: it first runs the file its environment's ENV names", risky: isTrue},
	{id: "interactive", key: "stdin", why: "keeps the container's stdin open: a shell reads commands from it", risky: isTrue},
	{id: "interactive", key: "stdin_once", why: "keeps the container's stdin open: a shell reads commands from it", risky: isTrue},
	{id: "code_env", key: "name", under: "env", why: "shells run the file ENV and BASH_ENV name and a login shell $HOME/.profile, PATH chooses which file a bare command name runs, the dynamic loader loads what LD_PRELOAD and LD_LIBRARY_PATH name: code the command does not show", risky: codeEnvName},
	{id: "sysctl", key: "sysctl", why: "changes kernel parameters for the pod", risky: nonEmpty},
	{id: "selinux", key: "se_linux_options", why: "sets the SELinux user, role or type the container runs with", risky: nonEmpty},
	{id: "unconfined_profile", key: "container.apparmor.security.beta.kubernetes.io/", prefix: true, under: "annotations", why: "selects the AppArmor profile; anything but runtime/default weakens it", risky: notRuntimeDefault},
	{id: "unconfined_profile", key: "seccomp.security.alpha.kubernetes.io/", prefix: true, under: "annotations", why: "selects the seccomp profile; anything but runtime/default weakens it", risky: notRuntimeDefault},
	{id: "unconfined_profile", key: "container.seccomp.security.alpha.kubernetes.io/", prefix: true, under: "annotations", why: "selects a container's seccomp profile; anything but runtime/default weakens it", risky: notRuntimeDefault},
	{id: "pod_metadata", key: "metadata", under: "template", why: "the pod's labels and annotations (its security profiles, sidecars, the Services and policies that select it)", unknownOnly: true},
	{id: "pod_metadata", key: "", prefix: true, under: "annotations", why: "an annotation (a security profile, a sidecar injector's switch)", unknownOnly: true},
	{id: "pod_metadata", key: "", prefix: true, under: "labels", why: "a label (the Services and policies that select the pod)", unknownOnly: true},
	{id: "executable_volume", key: "default_mode", why: "makes the volume's files executable: new code in the workload, which its programs can run (a web server's CGI)", risky: executableMode},
	{id: "executable_volume", key: "mode", under: "items", why: "makes the file executable: new code in the workload, which its programs can run (a web server's CGI)", risky: executableMode},
	{id: "volume_mount", key: "mount_path", under: "volume_mount", why: "puts a volume's files at this path of the container: its programs may read them as configuration or run them (a web server's httpd.conf, a script)", risky: always},
	{id: "volume_mount", key: "sub_path", under: "volume_mount", why: "puts one file of a volume at the mount path: its programs may read it as configuration or run it", risky: nonEmpty},
	{id: "volume_source", key: "name", under: "config_map", why: "the volume's files come from this ConfigMap: what they hold is on this screen only where this plan creates or changes that ConfigMap", risky: nonEmpty},
	{id: "volume_source", key: "name", under: "config_map_key_ref", why: "the variable's value comes from this ConfigMap: what it holds is on this screen only where this plan creates or changes that ConfigMap", risky: nonEmpty},
	{id: "volume_source", key: "items", under: "config_map", why: "puts the ConfigMap's keys at these file paths of the volume: another key may now be read as another file (a web server's httpd.conf)", risky: nonEmpty},
	{id: "probe_host", key: "host", under: "http_get", why: "the kubelet makes this request from the node's network, to any address", risky: nonEmpty},
	{id: "probe_host", key: "host", under: "tcp_socket", why: "the kubelet connects from the node's network, to any address", risky: nonEmpty},
	{id: "secret_env", key: "secret_key_ref", why: "puts a Secret's value into an environment variable", risky: nonEmpty},
	{id: "secret_env_from", key: "secret_ref", under: "env_from", why: "puts every key of a Secret into environment variables", risky: nonEmpty},
	{id: "code_env", key: "config_map_ref", under: "env_from", why: "every key of the ConfigMap becomes an environment variable, whatever its name (ENV, LD_PRELOAD): code the command does not show", risky: nonEmpty},
	{id: "secret_volume", key: "secret", under: "volume", why: "mounts a Secret into the pod", risky: nonEmpty},
	{id: "service_exposed", key: "type", under: "spec", resource: "kubernetes_service", why: "exposes the Service outside the cluster", risky: oneOf("LoadBalancer", "NodePort")},
	{id: "external_ips", key: "external_ips", why: "the Service accepts traffic for these external addresses", risky: nonEmpty},
	{id: "unknown_config", key: "data", resource: "kubernetes_config_map", why: "the ConfigMap's files (a script a workload runs): this screen cannot show what they will hold", unknownOnly: true},
	{id: "unknown_config", key: "binary_data", resource: "kubernetes_config_map", why: "the ConfigMap's files (a script a workload runs): this screen cannot show what they will hold", unknownOnly: true},
	{id: "unknown_config", key: "", prefix: true, under: "data", resource: "kubernetes_config_map", why: "a file of the ConfigMap (a script a workload runs): this screen cannot show what it will hold", unknownOnly: true},
	{id: "unknown_config", key: "", prefix: true, under: "binary_data", resource: "kubernetes_config_map", why: "a file of the ConfigMap (a script a workload runs): this screen cannot show what it will hold", unknownOnly: true},
	{id: "binary_data", key: "binary_data", resource: "kubernetes_config_map", why: "files given as base64: this screen shows them encoded, not what they hold (a script a workload runs)", risky: nonEmpty},
	{id: "placement", key: "node_name", why: "binds the pod to this node, past the scheduler and the taints that keep workloads off a node (the control plane)", risky: nonEmpty},
	{id: "placement", key: "toleration", why: "lets the pod run on nodes tainted to keep workloads off them (the control plane), or stay on a node being drained", risky: nonEmpty},
	{id: "placement", key: "node_selector", why: "chooses the nodes the pod runs on (the control plane, the nodes of other tenants)", risky: nonEmpty},
	{id: "placement", key: "affinity", why: "chooses the nodes the pod runs on, or the pods it runs beside", risky: nonEmpty},
	{id: "placement", key: "priority_class_name", why: "a higher priority preempts other pods on a full node and is evicted last (system-node-critical is the kubelet's own)", risky: nonEmpty},
	{id: "placement", key: "host_aliases", why: "adds lines to the pod's /etc/hosts: a name (the Vault server, the API server) resolves to another address", risky: nonEmpty},
	{id: "placement", key: "dns_config", why: "the pod's DNS servers and search domains: a name (the Vault server, the API server) may resolve to another address", risky: nonEmpty},
	{id: "placement", key: "dns_policy", why: "the pod leaves the cluster's DNS: its dns_config alone says what every name resolves to", risky: oneOf("None")},
	{id: "placement", key: "share_process_namespace", why: "the pod's containers see and signal each other's processes and reach their files through /proc/<pid>/root", risky: isTrue},
	{id: "selector", key: "selector", under: "spec", resource: "kubernetes_service", why: "the Service sends its traffic to the pods these labels select: another workload may now get it", risky: always},
	{id: "selector", key: "labels", under: "template", why: "the pod's labels: the Services and network policies that select pods by label now select these, or no longer do", risky: always, valueOnly: true, updateOnly: true},
	{id: "look_alike", key: "name", why: "a name with non-ASCII characters can look like another", risky: nonASCIIString, valueOnly: true},
	{id: "look_alike", key: "namespace", why: "a name with non-ASCII characters can look like another", risky: nonASCIIString, valueOnly: true},
	{id: "look_alike", key: "generate_name", why: "a name with non-ASCII characters can look like another", risky: nonASCIIString, valueOnly: true},
}

// resourceRules flag a whole resource whatever it changes: RBAC (who may do what in the cluster) and
// Ingress (what reaches the cluster from outside).
var resourceRules = map[string]struct{ id, why string }{
	"kubernetes_role":                 {"rbac", "changes who may do what in a namespace"},
	"kubernetes_cluster_role":         {"rbac", "changes who may do what in the whole cluster"},
	"kubernetes_role_binding":         {"rbac", "grants a role in a namespace"},
	"kubernetes_cluster_role_binding": {"rbac", "grants a role in the whole cluster"},
	"kubernetes_ingress":              {"ingress", "routes traffic from outside the cluster"},
}

// severity orders the flags on the screen, the worst first: what gives a workload the node, then what
// destroys, then identities, credentials and RBAC, then exposure, then what code runs, then names.
var severity = []string{
	"privileged", "host_path", "host_pid", "host_network", "host_ipc", "capabilities_add", "capabilities_drop", "allow_privilege_escalation",
	"run_as_root", "root_group", "run_as_non_root_off", "host_port", "probe_host", "sysctl", "selinux", "unconfined_profile", "placement", "pod_metadata",
	"delete", "replace",
	"rbac", "automount_service_account_token", "service_account", "secret_env", "secret_env_from", "secret_volume",
	"ingress", "service_exposed", "external_ips", "selector",
	"hidden", "unknown_name", "cut", "config_consumed", "unknown_config", "binary_data", "image", "command", "args", "interactive", "code_env", "executable_volume", "volume_mount", "volume_source",
	"look_alike",
}

// sortFlags orders flags by severity, keeping the plan's order among flags of one rule.
func sortFlags(flags []Flag) {
	rank := func(id string) int {
		if i := slices.Index(severity, id); i >= 0 {
			return i
		}
		return len(severity)
	}
	slices.SortStableFunc(flags, func(a, b Flag) int { return rank(a.Rule) - rank(b.Rule) })
}

// flagsOf finds the risk flags of one change.
func flagsOf(c *Change, before, after val) []Flag {
	addr := screen.ASCII(c.Address)
	var out []Flag
	if c.Mode != "" && c.Mode != "managed" {
		return nil
	}
	whole := func(rule, why string) {
		before, after := "exists", "updated"
		switch {
		case c.IsReplace():
			after = "destroyed and created again"
		case c.Has("create"):
			before, after = "(none)", "created"
		case c.Has("delete"):
			after = "destroyed"
		}
		out = append(out, Flag{Rule: rule, Address: addr, Before: before, After: after, Why: why})
	}
	if screen.HasNonASCII(c.Address) {
		whole("look_alike", "the address has non-ASCII characters and can look like another resource's")
	}
	switch {
	case c.IsReplace():
		why := "the resource is destroyed and created again"
		if len(c.ReplacePaths) > 0 {
			paths := make([]string, len(c.ReplacePaths))
			for i, p := range c.ReplacePaths {
				paths[i] = Path(p).String()
			}
			why += ", because of " + strings.Join(paths, ", ")
		}
		whole("replace", why)
	case c.Has("delete"):
		whole("delete", "the resource and what it holds are gone")
	}
	if r, ok := resourceRules[c.Type]; ok {
		whole(r.id, r.why)
	}
	if c.Has("delete") && !c.Has("create") {
		// A deletion sets nothing; it is flagged above as a whole.
		return out
	}
	f := &flagger{change: c, address: addr}
	f.walk(nil, before, after)
	out = append(append(out, rootByOmission(c, addr)...), capabilitiesKept(c, addr)...)
	return append(append(out, f.out...), cutValues(c, addr)...)
}

// cutValues flags every string the change sets that is longer than the screen shows (MaxStringBytes): what
// is cut is not on the screen, and on an update a change past the cut shows before and after alike. A
// sensitive one is not: the screen shows none of it, and flags it as hidden.
func cutValues(c *Change, addr string) []Flag {
	var out []Flag
	for _, path := range LongStrings(c) {
		a := root(c.After, c.AfterSensitive, c.AfterUnknown).at(path)
		if a.sensitive() {
			continue
		}
		b := root(c.Before, c.BeforeSensitive, nil).at(path)
		s, _ := a.v.(string)
		out = append(out, Flag{Rule: "cut", Address: addr, Path: path.String(), Before: show(b, maxFlagStringBytes, maxFlagValueBytes),
			After: show(a, maxFlagStringBytes, maxFlagValueBytes),
			Why:   fmt.Sprintf("%d bytes: this screen shows only the first %d, the rest (which may be what changes) is not shown", len(s), MaxStringBytes),
			path:  path})
	}
	return out
}

type flagger struct {
	change  *Change
	address string
	out     []Flag
	pods    []pod
}

// providerDefault reports whether the value at path is inside a pod spec of the change and one the provider
// leaves to the API server because the configuration does not set it (providerSets).
func (f *flagger) providerDefault(path Path) bool {
	if f.pods == nil {
		findPods(f.change.After, nil, &f.pods)
	}
	for _, p := range f.pods {
		if p.poisoned || len(path) <= len(p.path) || !path.hasPrefix(Path(p.path)) {
			continue
		}
		cfg, static := configAt(f.change.Config, p.path)
		// providerComputed names are identifiers, which Path.String writes as unknownPaths does.
		return static && providerSets(cfg, path[len(p.path):].String())
	}
	return false
}

func (f *flagger) walk(path Path, b, a val) {
	if a.unknown() {
		return
	}
	keys, n, isMap, isList := children(b, a)
	switch {
	case isMap && !isList:
		for _, k := range keys {
			cb, ca := b.key(k), a.key(k)
			p := path.with(k)
			f.check(p, k, cb, ca)
			f.walk(p, cb, ca)
		}
	case isList && !isMap:
		for i := range n {
			f.walk(path.with(i), b.index(i), a.index(i))
		}
	}
}

// check flags the attribute at path (whose key is key) if the plan changes it to a risky value, or to a
// value known only after apply.
func (f *flagger) check(path Path, key string, b, a val) {
	// A null that was not there before (a block created without the attribute) is a change for the rules
	// whose risk is the provider's default for null.
	nullAppears := !b.present && a.present && a.v == nil
	if same(b, a) && !nullAppears {
		return
	}
	unknown := anyTrue(a.unk)
	if a.sensM == true && a.hasValue() {
		// The top of a sensitive value: this screen shows "(sensitive)", never the value.
		f.add(path, "hidden", "marked sensitive by the workspace: this screen cannot show the value that will be applied", b, a, unknown)
	}
	if screen.HasNonASCII(key) {
		f.add(path, "look_alike", "an attribute or map key with non-ASCII characters can look like another", b, a, unknown)
	}
	if unknown && f.providerDefault(path) {
		// Unknown because the configuration leaves it to the API server (the namespace's default service
		// account, say): not a value the plan hides. One the configuration computes at apply is flagged.
		return
	}
	for i := range rules {
		r := &rules[i]
		keyMatches := r.key == key || (r.prefix && strings.HasPrefix(key, r.key))
		if !keyMatches || (r.resource != "" && r.resource != f.change.Type) || (r.under != "" && !slices.Contains(path[:len(path)-1], any(r.under))) {
			continue
		}
		switch {
		case r.unknownOnly:
			if a.unknown() {
				f.add(path, r.id, r.why, b, a, true)
			}
		case unknown && r.valueOnly:
		case r.updateOnly && (!f.change.Has("update") || f.change.IsReplace()):
		case unknown:
			f.add(path, r.id, r.why, b, a, true)
		case r.nullIsRisky && r.risky(a) && (nullAppears || !same(b, a)):
			f.add(path, r.id, r.why, b, a, false)
		case nullAppears || (isEmpty(b) && isEmpty(a)):
			// null and [] (or "") mean the same to Kubernetes: no command is no command.
		case r.risky(a):
			f.add(path, r.id, r.why, b, a, false)
		}
	}
}

func (f *flagger) add(path Path, id, why string, b, a val, unknown bool) {
	if unknown {
		why += "; known only after apply"
	}
	f.out = append(f.out, Flag{Rule: id, Address: f.address, Path: path.String(), Before: show(b, maxFlagStringBytes, maxFlagValueBytes),
		After: show(a, maxFlagStringBytes, maxFlagValueBytes), Why: why, KnownAfterApply: unknown, path: path})
}

func isTrue(a val) bool  { return a.present && a.v == true }
func isFalse(a val) bool { return a.present && a.v == false }
func always(val) bool    { return true }

// isZeroOrNull: an attribute the plan sets to 0, or leaves null in a block it sets (the provider applies 0).
func isZeroOrNull(a val) bool { return isZero(a) || (a.present && a.v == nil) }

// containersOf calls fn for every container and init container of the change's pod specs (not those known
// only after apply as a whole), with the same container of Before where Before has one at that path.
func containersOf(c *Change, fn func(path Path, spec, ctr, beforeSpec, beforeCtr any, hasBefore bool)) {
	var pods []pod
	findPods(c.After, nil, &pods)
	for _, p := range pods {
		if p.poisoned {
			continue
		}
		bp, hasPod := configAt(c.Before, p.path)
		for _, k := range []string{"init_container", "container"} {
			list, _ := p.spec[k].([]any)
			for i, ctr := range list {
				var bc any
				hasBefore := false
				if hasPod {
					bc, hasBefore = configAt(bp, []any{k, i})
				}
				fn(append(Path(slices.Clip(p.path)), k, i), p.spec, ctr, bp, bc, hasBefore)
			}
		}
	}
}

// rootByOmission flags every container of the change's pod specs to which no security_context gives a user
// (neither its own run_as_user nor its pod's): it runs as its image's user, root in most images, and no
// attribute says so, so no attribute rule can flag it. It is flagged where the plan makes it so: a new
// container, or one that had a user before.
func rootByOmission(c *Change, addr string) []Flag {
	var out []Flag
	containersOf(c, func(path Path, spec, ctr, beforeSpec, beforeCtr any, hasBefore bool) {
		if _, set := userOf(spec, ctr); set {
			return
		}
		b := val{}
		if hasBefore {
			u, set := userOf(beforeSpec, beforeCtr)
			if !set {
				return // it ran as its image's user before too
			}
			b = val{v: u, present: true}
		}
		out = append(out, Flag{Rule: "run_as_root", Address: addr, Path: path.String(), Before: show(b, maxFlagStringBytes, maxFlagValueBytes),
			After: "(no user)", Why: "no security_context gives the container a user: it runs as its image's user, root in most images", path: path})
	})
	return out
}

// capabilitiesKept flags every container whose security_context does not drop ALL capabilities where the
// plan makes it so (a new container, or one that dropped ALL before): it keeps the runtime's default
// capabilities, and a block or a list element left out is no attribute an attribute rule sees.
func capabilitiesKept(c *Change, addr string) []Flag {
	var out []Flag
	containersOf(c, func(path Path, _, ctr, _, beforeCtr any, hasBefore bool) {
		if dropsAll(ctr) || (hasBefore && !dropsAll(beforeCtr)) {
			return
		}
		b := val{}
		if hasBefore {
			b = val{v: []any{"ALL"}, present: true}
		}
		after := "(ALL not dropped)"
		if d, ok := configAt(ctr, []any{"security_context", 0, "capabilities", 0, "drop"}); ok {
			after = show(val{v: d, present: true}, maxFlagStringBytes, maxFlagValueBytes)
		}
		out = append(out, Flag{Rule: "capabilities_drop", Address: addr, Path: path.String(), Before: show(b, maxFlagStringBytes, maxFlagValueBytes),
			After: after, Why: "capabilities.drop does not hold \"ALL\": the container keeps the runtime's default capabilities (NET_RAW, CHOWN, DAC_OVERRIDE, SETUID, …)", path: path})
	})
	return out
}

// dropsAll reports whether a container's security_context drops ALL capabilities.
func dropsAll(ctr any) bool {
	d, _ := configAt(ctr, []any{"security_context", 0, "capabilities", 0, "drop"})
	l, _ := d.([]any)
	return slices.Contains(l, any("ALL"))
}

// userOf is the run_as_user a container runs with, from its own security_context or else its pod's; set is
// false when neither has one (null counts as set: the provider applies it as 0, which the attribute rule
// flags).
func userOf(spec, container any) (user any, set bool) {
	for _, v := range []any{container, spec} {
		if sc, ok := configAt(v, []any{"security_context", 0}); ok {
			if m, ok := sc.(map[string]any); ok {
				if u, set := m["run_as_user"]; set {
					return u, true
				}
			}
		}
	}
	return nil, false
}

// executableMode is true for a file mode (provider 1.13.4 writes them as octal strings, "0644") with an
// execute bit, or one that is not an octal number.
func executableMode(a val) bool {
	s, ok := a.v.(string)
	if !a.present || a.v == nil {
		return false
	}
	m, err := strconv.ParseUint(s, 8, 32)
	return !ok || err != nil || m&0o111 != 0
}

func notRuntimeDefault(a val) bool {
	s, ok := a.v.(string)
	return a.present && (!ok || (s != "runtime/default" && s != "docker/default"))
}

func isZero(a val) bool {
	switch x := a.v.(type) {
	case int64:
		return a.present && x == 0
	case float64:
		return a.present && x == 0
	}
	return false
}

func nonZero(a val) bool {
	switch x := a.v.(type) {
	case int64:
		return x != 0
	case float64:
		return x != 0
	case nil:
		return false
	}
	return a.present
}

// nonEmpty is true for a block or list that has at least one element with anything in it, or for any other
// value that is not null.
func nonEmpty(a val) bool {
	if !a.hasValue() {
		return false
	}
	switch x := a.v.(type) {
	case []any:
		for _, e := range x {
			if e != nil {
				return true
			}
		}
		return false
	case map[string]any:
		return len(x) > 0
	case string:
		return x != ""
	}
	return true
}

// isEmpty is true for no value, null, and an empty list, map or string.
func isEmpty(x val) bool {
	if !x.hasValue() {
		return true
	}
	switch v := x.v.(type) {
	case []any:
		return len(v) == 0
	case map[string]any:
		return len(v) == 0
	case string:
		return v == ""
	}
	return false
}

func oneOf(values ...string) func(val) bool {
	return func(a val) bool {
		s, ok := a.v.(string)
		return a.present && ok && slices.Contains(values, s)
	}
}

func nonASCIIString(a val) bool {
	s, ok := a.v.(string)
	return a.present && ok && screen.HasNonASCII(s)
}

// codeEnvName: an environment variable a shell or the dynamic loader reads as code to run or load, the same
// names the shipped rule plan-no-code-env refuses (a policy that widens the rule still sees them flagged).
func codeEnvName(a val) bool {
	s, ok := a.v.(string)
	return a.present && ok && (slices.Contains([]string{"ENV", "BASH_ENV", "HOME", "PATH"}, s) || strings.HasPrefix(s, "LD_"))
}

// hasZero: a list that holds the number 0 (a supplemental group).
func hasZero(a val) bool {
	l, ok := a.v.([]any)
	if !a.present || !ok {
		return false
	}
	for _, e := range l {
		if isZero(val{v: e, present: true}) {
			return true
		}
	}
	return false
}
