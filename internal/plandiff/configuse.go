package plandiff

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/internal/screen"
)

// configUse is one workload of the plan (created, changed or left as it is) that reads a ConfigMap: as a
// volume (where it is mounted) or as a variable's value.
type configUse struct {
	workload, namespace, configMap, how string
}

// configUses are the ways the workloads of the plan read ConfigMaps after it: every volume's config_map and
// every env value_from config_map_key_ref (env_from config_map_ref too), with the mount paths of the volume.
func configUses(p *Plan) []configUse {
	var out []configUse
	for i := range p.Changes {
		c := &p.Changes[i]
		if c.After == nil || (c.Mode != "" && c.Mode != "managed") {
			continue
		}
		var pods []pod
		findPods(c.After, nil, &pods)
		ns := namespaceOf(c.After)
		addr := screen.ASCII(c.Address)
		for _, pd := range pods {
			if pd.poisoned {
				continue
			}
			for _, v := range listOf(pd.spec["volume"]) {
				vm := mapValue(v)
				name, _ := firstObject(vm["config_map"])["name"].(string)
				if name == "" {
					continue
				}
				var paths []string
				for _, ctr := range pd.containers() {
					for _, m := range listOf(mapValue(ctr)["volume_mount"]) {
						if mm := mapValue(m); mm["name"] == vm["name"] {
							if mp, ok := mm["mount_path"].(string); ok {
								paths = append(paths, screen.ASCII(mp))
							}
						}
					}
				}
				how := "as a volume, mounted nowhere"
				if len(paths) > 0 {
					how = "as files at " + strings.Join(paths, ", ")
				}
				out = append(out, configUse{workload: addr, namespace: ns, configMap: name, how: how})
			}
			for _, ctr := range pd.containers() {
				cm := mapValue(ctr)
				for _, e := range listOf(cm["env"]) {
					ref := firstObject(firstObject(mapValue(e)["value_from"])["config_map_key_ref"])
					if name, _ := ref["name"].(string); name != "" {
						env, _ := mapValue(e)["name"].(string)
						out = append(out, configUse{workload: addr, namespace: ns, configMap: name, how: "as the variable " + screen.ASCII(env)})
					}
				}
				for _, e := range listOf(cm["env_from"]) {
					if name, _ := firstObject(mapValue(e)["config_map_ref"])["name"].(string); name != "" {
						out = append(out, configUse{workload: addr, namespace: ns, configMap: name, how: "as variables (every key)"})
					}
				}
			}
		}
	}
	return out
}

// consumedConfig flags a ConfigMap whose data the change sets (a create, or an update of its data) when a
// workload of the plan reads it. Found in review (2026-12-07): a web server approved with a ConfigMap volume
// and a probe that runs one of its files; a later plan changed only that file, under "Risk flags: none",
// and the screen said nothing of the workload that runs it. A mounted file changes in running pods without
// a rollout, so the ConfigMap's data is the workload's code or configuration.
func consumedConfig(uses []configUse, c *Change, addr string) []Flag {
	if c.Type != "kubernetes_config_map" || c.After == nil || (c.Mode != "" && c.Mode != "managed") {
		return nil
	}
	after, before := mapValue(c.After), mapValue(c.Before)
	if c.Before != nil && reflect.DeepEqual(after["data"], before["data"]) && reflect.DeepEqual(after["binary_data"], before["binary_data"]) {
		return nil
	}
	name, _ := firstObject(after["metadata"])["name"].(string)
	ns := namespaceOf(c.After)
	var out []Flag
	seen := map[string]bool{}
	for _, u := range uses {
		if u.configMap != name || u.namespace != ns || seen[u.workload+u.how] {
			continue
		}
		seen[u.workload+u.how] = true
		out = append(out, Flag{Rule: "config_consumed", Address: addr, Path: "data", Before: "(new or changed data)", After: "read by " + u.workload + " " + u.how,
			Why:  fmt.Sprintf("%s reads this ConfigMap: its data is that workload's configuration or code (a script a probe or a server runs), and mounted files change in running pods without a rollout", u.workload),
			path: Path{"data"}})
	}
	return out
}

func listOf(v any) []any {
	l, _ := v.([]any)
	return l
}
