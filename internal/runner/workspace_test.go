package runner

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// configMapVolume lays files out as the kubelet writes a ConfigMap volume: the data in a timestamped
// folder, ..data linking to it, and one link per key.
func configMapVolume(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	stamp := "..2026_11_30_12_00_00.000000001"
	if err := os.Mkdir(filepath.Join(dir, stamp), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(stamp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, stamp, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestCopyWorkspaceConfigMapVolume(t *testing.T) {
	src := configMapVolume(t, map[string]string{
		"main.tf": "resource x y {}\n", "variables.tf": "", "terraform.tfvars": "a = 1\n",
		".terraform.lock.hcl": "# lock\n", "README.md": "# hi\n", "terraform.tfstate": "{}",
	})
	dst := t.TempDir()
	got, err := CopyWorkspace(src, dst)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got.Copied)
	slices.Sort(got.Skipped)
	if strings.Join(got.Copied, " ") != ".terraform.lock.hcl main.tf terraform.tfvars variables.tf" ||
		strings.Join(got.Skipped, " ") != "README.md terraform.tfstate" {
		t.Errorf("copied %v skipped %v", got.Copied, got.Skipped)
	}
	data, err := os.ReadFile(filepath.Join(dst, "main.tf"))
	if err != nil || string(data) != "resource x y {}\n" {
		t.Errorf("main.tf: %q %v", data, err)
	}
	if fi, err := os.Lstat(filepath.Join(dst, "main.tf")); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Errorf("copy is not a private regular file: %v %v", fi.Mode(), err)
	}
	entries, _ := os.ReadDir(dst)
	if len(entries) != 4 {
		t.Errorf("dst holds %d entries", len(entries))
	}
}

func TestCopyWorkspaceRefuses(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "secret.tf")
	if err := os.WriteFile(outside, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  string
	}{
		{"subdirectory", func(t *testing.T, dir string) { mkdir(t, dir, "modules") }, "is a directory"},
		{"subdirectory named like a file", func(t *testing.T, dir string) { mkdir(t, dir, "x.tf") }, "is a directory"},
		{"dot-dot inside a name", func(t *testing.T, dir string) { write(t, dir, "a..tf", "") }, "file name"},
		{"space in a name", func(t *testing.T, dir string) { write(t, dir, "a b.tf", "") }, "file name"},
		{"non-ASCII name", func(t *testing.T, dir string) { write(t, dir, "ä.tf", "") }, "file name"},
		{"override file", func(t *testing.T, dir string) { write(t, dir, "override.tf", "") }, "override file"},
		{"named override file", func(t *testing.T, dir string) { write(t, dir, "zzz_override.tf", "") }, "override file"},
		{"JSON override file", func(t *testing.T, dir string) { write(t, dir, "x_override.tf.json", "") }, "override file"},
		{"the runner's own override", func(t *testing.T, dir string) { write(t, dir, BackendOverrideFile, "") }, "override file"},
		{"link out of the workspace", func(t *testing.T, dir string) {
			if err := os.Symlink(outside, filepath.Join(dir, "evil.tf")); err != nil {
				t.Fatal(err)
			}
		}, "outside the workspace"},
		{"dangling link", func(t *testing.T, dir string) {
			if err := os.Symlink("nowhere.tf", filepath.Join(dir, "gone.tf")); err != nil {
				t.Fatal(err)
			}
		}, "gone.tf"},
		{"oversized file", func(t *testing.T, dir string) {
			write(t, dir, "big.tf", strings.Repeat("#", MaxWorkspaceFileSize+1))
		}, "larger than"},
		{"no .tf file", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "main.tf")); err != nil {
				t.Fatal(err)
			}
			write(t, dir, "terraform.tfvars", "")
		}, "no .tf file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			write(t, dir, "main.tf", "")
			tt.setup(t, dir)
			_, err := CopyWorkspace(dir, t.TempDir())
			if !errors.Is(err, ErrBadWorkspace) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want ErrBadWorkspace with %q", err, tt.want)
			}
		})
	}
	if _, err := CopyWorkspace(filepath.Join(t.TempDir(), "missing"), t.TempDir()); err == nil {
		t.Error("missing source: no error")
	}
}

func mkdir(t *testing.T, dir, name string) {
	t.Helper()
	if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, dir, name, data string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestRenderBackendOverride(t *testing.T) {
	got, err := RenderBackendOverride(BackendConfig{SecretSuffix: "k8s-demo", Namespace: "demo-app", ConfigPath: "/var/run/agent-sandbox/credentials/kubeconfig"})
	if err != nil {
		t.Fatal(err)
	}
	want := `# Written by agent-sandbox: Terraform state lives in a Secret of the target namespace, reached with
# the per-action kubeconfig. This override replaces any backend the workspace declares.
terraform {
  backend "kubernetes" {
    secret_suffix = "k8s-demo"
    namespace     = "demo-app"
    config_path   = "/var/run/agent-sandbox/credentials/kubeconfig"
  }
}
`
	if string(got) != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}

	// A path is quoted, never interpolated.
	got, err = RenderBackendOverride(BackendConfig{SecretSuffix: "w", Namespace: "n", ConfigPath: `/tmp/a"b\c/${x}/%{y}`})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got), `config_path   = "/tmp/a\"b\\c/$${x}/%%{y}"`) {
		t.Errorf("escaping: %s", got)
	}

	for _, bad := range []BackendConfig{
		{SecretSuffix: "Bad_Name", Namespace: "n", ConfigPath: "/k"},
		{SecretSuffix: "w", Namespace: "kube.system", ConfigPath: "/k"},
		{SecretSuffix: "w", Namespace: "n", ConfigPath: "relative/kubeconfig"},
		{SecretSuffix: "w", Namespace: "n", ConfigPath: "/k\n}\nterraform {"},
		{SecretSuffix: "w", Namespace: "n", ConfigPath: ""},
	} {
		if _, err := RenderBackendOverride(bad); err == nil {
			t.Errorf("%+v: no error", bad)
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

func TestCopyWorkspaceRefusesCodeExecution(t *testing.T) {
	for name, src := range map[string]string{
		"provider exec plugin": "provider \"kubernetes\" {\n  exec {\n    api_version = \"client.authentication.k8s.io/v1\"\n    command = \"sh\"\n  }\n}\n",
		"local-exec":           "resource \"null_resource\" \"x\" {\n  provisioner \"local-exec\" { command = \"id\" }\n}\n",
		"external data":        "data \"external\" \"x\" { program = [\"sh\"] }\n",
	} {
		t.Run(name, func(t *testing.T) {
			src2 := t.TempDir()
			file := "main.tf"
			if err := os.WriteFile(filepath.Join(src2, file), []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := CopyWorkspace(src2, t.TempDir()); !errors.Is(err, ErrBadWorkspace) || !strings.Contains(err.Error(), "runs programs") {
				t.Fatalf("got %v", err)
			}
		})
	}
	// The demo module itself is plain resources.
	if _, err := CopyWorkspace("../../terraform/k8s-demo", t.TempDir()); err != nil {
		t.Fatalf("the demo workspace was refused: %v", err)
	}
}
