package plandiff

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// update is the one switch that rewrites the golden files and the derived fixtures in testdata:
//
//	go test ./internal/plandiff -run 'Golden|Fixtures' -update
//
// Review the diff of testdata like code: it is what an approver reads.
var update = flag.Bool("update", false, "rewrite testdata's golden screens and derived fixtures")

// replaceFixture is a real `terraform show -json` of the demo's saved plan, a replacement of
// kubernetes_deployment.web (its selector's track label changes) beside a no-op service.
const replaceFixture = "../toolrun/testdata/plan-replace.json"

// derivedFixtures are the plans the golden tests read beyond the real one. Each is made from
// replaceFixture by the code below, so the edits are reviewable; -update rewrites the files, and
// TestDerivedFixtures fails when a file and its code disagree.
var derivedFixtures = map[string]func(t *testing.T) map[string]any{
	"plan-update.json":   updateFixture,
	"plan-incident.json": incidentFixture,
	"plan-long.json":     longFixture,
}

// TestDerivedFixtures: the derived fixtures in testdata are what their code makes.
func TestDerivedFixtures(t *testing.T) {
	for name, make := range derivedFixtures {
		got, err := json.MarshalIndent(make(t), "", " ")
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, '\n')
		path := filepath.Join("testdata", name)
		if *update {
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (go test -update creates it)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is not what its code in fixtures_test.go makes (go test -update to rewrite it)", path)
		}
	}
}

// readDoc decodes a show -json document keeping numbers as written.
func readDoc(t *testing.T, path string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

// deepCopy copies a decoded JSON value.
func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = deepCopy(e)
		}
		return m
	case []any:
		l := make([]any, len(x))
		for i, e := range x {
			l[i] = deepCopy(e)
		}
		return l
	}
	return v
}

// at walks a decoded JSON value along path (keys and list indexes).
func at(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, step := range path {
		switch s := step.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("at %v: %q of a %T", path, s, v)
			}
			v = m[s]
		case int:
			l, ok := v.([]any)
			if !ok || s >= len(l) {
				t.Fatalf("at %v: [%d] of %T", path, s, v)
			}
			v = l[s]
		}
	}
	return v
}

// set replaces the value at path; the last step is a key of an object.
func set(t *testing.T, v any, value any, path ...any) {
	t.Helper()
	m, ok := at(t, v, path[:len(path)-1]...).(map[string]any)
	if !ok {
		t.Fatalf("set %v: not an object", path)
	}
	m[path[len(path)-1].(string)] = value
}

// inPlaceUpdate turns the replacement's deployment change into an update whose after is its before
// (nothing unknown), for the edits of each fixture to change. The document keeps only what Parse reads.
func inPlaceUpdate(t *testing.T) (doc, change map[string]any) {
	t.Helper()
	real := readDoc(t, replaceFixture)
	rcs := real["resource_changes"].([]any)
	web := deepCopy(rcs[0]).(map[string]any)
	delete(web, "action_reason")
	change = web["change"].(map[string]any)
	delete(change, "replace_paths")
	change["actions"] = []any{"update"}
	change["after"] = deepCopy(change["before"])
	change["after_unknown"] = map[string]any{}
	change["after_sensitive"] = deepCopy(change["before_sensitive"])
	doc = map[string]any{
		"format_version":    real["format_version"],
		"terraform_version": real["terraform_version"],
		"resource_changes":  []any{web, deepCopy(rcs[1])},
	}
	return doc, change
}

// updateFixture is an ordinary update: two more replicas and more memory. Nothing in it is risky.
func updateFixture(t *testing.T) map[string]any {
	doc, change := inPlaceUpdate(t)
	after := change["after"]
	set(t, after, json.Number("4"), "spec", 0, "replicas")
	set(t, after, "64Mi", "spec", 0, "template", 0, "spec", 0, "container", 0, "resources", 0, "limits", 0, "memory")
	return doc
}

// podSpec is spec[0].template[0].spec[0] of a deployment's values.
var podSpec = []any{"spec", 0, "template", 0, "spec", 0}

func podPath(rest ...any) []any { return append(append([]any{}, podSpec...), rest...) }

// incidentFixture is the change a prompt-injected agent made to the demo: kubernetes_deployment.web runs
// privileged, as root (run_as_user left out, which the provider writes as 0), with the node's kubelet state
// directory mounted, and a command that copies the kubelet's client key to the page it serves.
func incidentFixture(t *testing.T) map[string]any {
	doc, change := inPlaceUpdate(t)
	after := change["after"]
	sc := podPath("container", 0, "security_context", 0)
	set(t, after, true, append(sc, "privileged")...)
	set(t, after, true, append(sc, "allow_privilege_escalation")...)
	set(t, after, json.Number("0"), append(sc, "run_as_user")...)
	set(t, after, false, append(sc, "run_as_non_root")...)
	set(t, after, false, append(sc, "read_only_root_filesystem")...)
	set(t, after, []any{"/bin/sh", "-c",
		"mkdir -p /tmp/www && cp /host/pki/kubelet-client-current.pem /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www"},
		podPath("container", 0, "command")...)
	mounts := at(t, after, podPath("container", 0, "volume_mount")...).([]any)
	set(t, after, append(mounts, map[string]any{
		"mount_path": "/host", "mount_propagation": "None", "name": "node-state", "read_only": false, "sub_path": nil,
	}), podPath("container", 0, "volume_mount")...)
	volumes := at(t, after, podPath("volume")...).([]any)
	hostVolume := deepCopy(volumes[0]).(map[string]any)
	hostVolume["name"] = "node-state"
	hostVolume["empty_dir"] = []any{}
	hostVolume["host_path"] = []any{map[string]any{"path": "/var/lib/kubelet", "type": "Directory"}}
	set(t, after, append(volumes, hostVolume), podPath("volume")...)
	return doc
}

// longFixture is a plan of 30 resources: 29 new ConfigMaps and, last, an update of the web deployment's
// image, whose risk flag must still be at the top of the first page.
func longFixture(t *testing.T) map[string]any {
	doc, change := inPlaceUpdate(t)
	set(t, change["after"], "docker.io/library/busybox:latest", podPath("container", 0, "image")...)
	web := doc["resource_changes"].([]any)[0]
	var rcs []any
	for i := 1; i <= 29; i++ {
		name := fmt.Sprintf("page-%02d", i)
		rcs = append(rcs, map[string]any{
			"address": fmt.Sprintf("kubernetes_config_map.page[%d]", i-1), "mode": "managed", "type": "kubernetes_config_map",
			"name": "page", "index": json.Number(fmt.Sprint(i - 1)), "provider_name": "registry.terraform.io/hashicorp/kubernetes",
			"change": map[string]any{
				"actions": []any{"create"},
				"before":  nil,
				"after": map[string]any{
					"binary_data": nil,
					"data":        map[string]any{"index.html": fmt.Sprintf("<h1>page %d</h1>", i)},
					"metadata": []any{map[string]any{
						"annotations": nil, "generate_name": nil, "labels": map[string]any{"app": "web"},
						"name": name, "namespace": "default",
					}},
				},
				"after_unknown": map[string]any{
					"data": map[string]any{}, "id": true,
					"metadata": []any{map[string]any{"generation": true, "labels": map[string]any{}, "resource_version": true, "self_link": true, "uid": true}},
				},
				"before_sensitive": false,
				"after_sensitive":  map[string]any{"data": map[string]any{}, "metadata": []any{map[string]any{"labels": map[string]any{}}}},
			},
		})
	}
	doc["resource_changes"] = append(rcs, web)
	return doc
}
