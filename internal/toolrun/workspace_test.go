package toolrun

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/tfcheck"
	"github.com/agent-sandbox/agent-sandbox/test/harness"
)

func TestLoadWorkspaceConfigMapVolume(t *testing.T) {
	src := harness.ConfigMapVolume(t, t.TempDir(), map[string]string{
		"main.tf":             "resource \"kubernetes_config_map\" \"x\" {\n  metadata {\n    name = var.name\n  }\n}\n",
		"variables.tf":        "variable \"name\" {\n  type = string\n}\n",
		"terraform.tfvars":    "name = \"web\"\n",
		".terraform.lock.hcl": "",
	})
	got, err := loadWorkspace(src)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(got))
	for n := range got {
		names = append(names, n)
	}
	slices.Sort(names)
	if strings.Join(names, " ") != ".terraform.lock.hcl main.tf terraform.tfvars variables.tf" {
		t.Errorf("files %v", names)
	}
	dst := t.TempDir()
	if err := writeFiles(dst, got); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(dst, "main.tf")); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Errorf("copy is not a private regular file: %v %v", fi.Mode(), err)
	}
	if err := writeFiles(dst, map[string][]byte{"../x.tf": nil}); err == nil {
		t.Error("writeFiles wrote outside its folder")
	}
}

// TestLoadWorkspaceRefusesCodeExecution: the tricks that passed the old regular expression are refused by
// the parser (internal/tfcheck holds the whole corpus).
func TestLoadWorkspaceRefusesCodeExecution(t *testing.T) {
	for name, src := range map[string]string{
		"exec with a comment":     "provider \"kubernetes\" {\n  exec /* c */ {\n    api_version = \"v1\"\n    command = \"/bin/sh\"\n  }\n}\n",
		"dynamic exec on apply":   "provider \"kubernetes\" {\n  dynamic \"exec\" {\n    for_each = terraform.applying ? [1] : []\n    content {\n      api_version = \"v1\"\n      command = \"/usr/local/bin/terraform\"\n    }\n  }\n}\n",
		"escaped local-exec":      "resource \"kubernetes_config_map\" \"x\" {\n  provisioner \"local\\u002dexec\" {\n    command = \"id\"\n  }\n}\n",
		"kubeconfig in an output": "output \"k\" {\n  value = file(\"/var/run/agent-sandbox/credentials/kubeconfig\")\n}\n",
	} {
		_, err := loadWorkspace(harness.ConfigMapVolume(t, t.TempDir(), map[string]string{"main.tf": src}))
		if !errors.Is(err, tfcheck.ErrRefused) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestValidateWorkspaceName(t *testing.T) {
	for _, ok := range []string{"k8s-demo", "a", "demo-v2", strings.Repeat("a", MaxWorkspaceNameLength)} {
		if err := ValidateWorkspaceName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "Demo", "demo_app", "-a", "a-", "../a", "a/b", "demo-2", strings.Repeat("a", MaxWorkspaceNameLength+1)} {
		if err := ValidateWorkspaceName(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
