// Package terraform holds the demo workspace that the agent plans and applies (k8s-demo/, see its README)
// and gives its Terraform files to the tests that build variants of it: each harmful-plan case
// (test/corpus/harmful) is the demo plus one change, so the demo's files live here once.
package terraform

import (
	"embed"
	"io/fs"
	"path"
)

//go:embed k8s-demo/*.tf
var demo embed.FS

// DemoFiles returns the demo workspace's Terraform files (main.tf, variables.tf, versions.tf), name ->
// content, as they stand in the repository.
func DemoFiles() (map[string][]byte, error) {
	entries, err := fs.ReadDir(demo, "k8s-demo")
	if err != nil {
		return nil, err
	}
	files := make(map[string][]byte, len(entries))
	for _, e := range entries {
		b, err := fs.ReadFile(demo, path.Join("k8s-demo", e.Name()))
		if err != nil {
			return nil, err
		}
		files[e.Name()] = b
	}
	return files, nil
}
