package corpus

import (
	"fmt"
	"strings"
)

// incidentEdits turn terraform/k8s-demo/main.tf into the incident of issue 21: the web Deployment runs
// privileged, as root, with a directory of the node mounted read-only, and its command prints a file of it
// reversed (so that no scrubber pattern would match what comes back through the pod logs).
var incidentEdits = []struct{ old, new string }{
	{"          security_context {\n            allow_privilege_escalation = false\n",
		"          security_context {\n            privileged                 = true\n            allow_privilege_escalation = false\n"},
	{"            run_as_non_root            = true\n            run_as_user                = 65532\n",
		"            run_as_non_root            = false\n            run_as_user                = 0\n"},
	{`exec httpd -f -p 8080 -h /tmp/www"]`, `rev /host/etc/hostname; exec httpd -f -p 8080 -h /tmp/www"]`},
	{"          volume_mount {\n            name       = \"tmp\"\n",
		"          volume_mount {\n            name       = \"host\"\n            mount_path = \"/host\"\n            read_only  = true\n          }\n\n          volume_mount {\n            name       = \"tmp\"\n"},
	{"        volume {\n          name = \"tmp\"\n",
		"        volume {\n          name = \"host\"\n          host_path {\n            path = \"/var/lib\"\n          }\n        }\n\n        volume {\n          name = \"tmp\"\n"},
}

// IncidentRules are the plan rules that must refuse the incident, among others.
var IncidentRules = []string{"plan-no-privileged", "plan-no-host-path", "plan-no-root-user", "plan-command-pinned"}

// Incident returns the demo's main.tf (its text given) with issue 21's attack applied.
func Incident(mainTF string) (string, error) {
	for _, e := range incidentEdits {
		if !strings.Contains(mainTF, e.old) {
			return "", fmt.Errorf("the demo's main.tf no longer has %q: update corpus.Incident", e.old)
		}
		mainTF = strings.Replace(mainTF, e.old, e.new, 1)
	}
	return mainTF, nil
}
