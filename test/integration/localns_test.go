//go:build integration

package integration

import (
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// localNamespace is the Namespace name as cluster/manifests/namespaces.yaml declares it, the manifest
// scripts/up.sh applies to the local cluster: a test's demo-app then carries the same Pod Security labels
// the real one does, and `vault configure` and `preflight` see what they see there.
func localNamespace(t *testing.T, name string) *corev1.Namespace {
	t.Helper()
	root, _, _ := chartPaths(t)
	manifest, err := os.ReadFile(filepath.Join(root, "cluster", "manifests", "namespaces.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range chartDecode(t, string(manifest)).find("Namespace", "") {
		if o.name != name {
			continue
		}
		var ns corev1.Namespace
		if err := chartStrictUnmarshal(o.json, &ns); err != nil {
			t.Fatal(err)
		}
		return &ns
	}
	t.Fatalf("cluster/manifests/namespaces.yaml declares no namespace %s", name)
	return nil
}
