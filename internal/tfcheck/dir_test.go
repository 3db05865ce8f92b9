//go:build unix

package tfcheck

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/test/harness"
)

const okTF = "output \"x\" {\n  value = \"ok\"\n}\n"

func TestCheckDirConfigMap(t *testing.T) {
	dir := harness.ConfigMapVolume(t, t.TempDir(), map[string]string{"main.tf": okTF, "terraform.tfvars": "x = 1\n"})
	files, err := CheckDir(dir, testOpts)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 || string(files["main.tf"]) != okTF {
		t.Fatalf("files = %v", files)
	}
}

func TestCheckDirRefuses(t *testing.T) {
	tests := []struct {
		name   string
		setup  func(t *testing.T, dir string)
		reason string
	}{
		{"a subfolder", func(t *testing.T, dir string) {
			mustMkdir(t, filepath.Join(dir, "modules"))
		}, "a folder"},
		{"a link to a subfolder", func(t *testing.T, dir string) {
			mustMkdir(t, filepath.Join(dir, "sub"))
			mustSymlink(t, "sub", filepath.Join(dir, "sub.tf"))
		}, "a folder"},
		{"a link leading outside", func(t *testing.T, dir string) {
			outside := filepath.Join(t.TempDir(), "secret.tf")
			mustWrite(t, outside, okTF)
			mustSymlink(t, outside, filepath.Join(dir, "evil.tf"))
		}, "leading outside"},
		{"a relative link climbing out", func(t *testing.T, dir string) {
			mustSymlink(t, "../../../../../../etc/hostname", filepath.Join(dir, "evil.tf"))
		}, "leading outside"},
		{"a named pipe", func(t *testing.T, dir string) {
			if err := syscall.Mkfifo(filepath.Join(dir, "pipe.tf"), 0o600); err != nil {
				t.Skip("mkfifo:", err)
			}
		}, "not a regular file"},
		{"a link to a named pipe", func(t *testing.T, dir string) {
			if err := syscall.Mkfifo(filepath.Join(dir, "..pipe"), 0o600); err != nil {
				t.Skip("mkfifo:", err)
			}
			mustSymlink(t, "..pipe", filepath.Join(dir, "pipe.tf"))
		}, "not a regular file"},
		{"an oversize file", func(t *testing.T, dir string) {
			mustWrite(t, filepath.Join(dir, "big.tf"), strings.Repeat("#", MaxFileSize+1))
		}, "a file holds at most"},
		{"a name outside the alphabet", func(t *testing.T, dir string) {
			mustWrite(t, filepath.Join(dir, "ma in.tf"), okTF)
		}, "file name"},
		{"a unicode name", func(t *testing.T, dir string) {
			mustWrite(t, filepath.Join(dir, "mаin.tf"), okTF)
		}, "file name"},
		{"an override file", func(t *testing.T, dir string) {
			mustWrite(t, filepath.Join(dir, "x_override.tf"), okTF)
		}, "override files"},
		{"a README", func(t *testing.T, dir string) {
			mustWrite(t, filepath.Join(dir, "README.md"), "hi")
		}, "not a workspace file"},
		{"a bad workspace", func(t *testing.T, dir string) {
			mustWrite(t, filepath.Join(dir, "evil.tf"), "output \"x\" {\n  value = file(\"/etc/passwd\")\n}\n")
		}, "function file()"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			mustWrite(t, filepath.Join(dir, "main.tf"), okTF)
			tt.setup(t, dir)
			files, err := CheckDir(dir, testOpts)
			if !errors.Is(err, ErrRefused) {
				t.Fatalf("not refused: files %v, err %v", files, err)
			}
			if files != nil {
				t.Errorf("files returned with a refusal")
			}
			if !strings.Contains(err.Error(), tt.reason) {
				t.Fatalf("refused, but not for %q:\n%v", tt.reason, err)
			}
		})
	}
}

func TestCheckDirMissing(t *testing.T) {
	_, err := CheckDir(filepath.Join(t.TempDir(), "nope"), testOpts)
	if err == nil || errors.Is(err, ErrRefused) {
		t.Fatalf("err = %v, want a plain error", err)
	}
}

func mustMkdir(t *testing.T, p string) {
	t.Helper()
	if err := os.Mkdir(p, 0o755); err != nil {
		t.Fatal(err)
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func mustWrite(t *testing.T, p, content string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestReadWorkspaceFilter: the server reads a person's folder with the filter the sandbox checks with.
// What Terraform would not read is passed over; what it would read is taken, so an override file or a
// refused file is refused rather than silently dropped; and the files it returns pass CheckDir unchanged,
// laid out as the ConfigMap the sandbox mounts.
func TestReadWorkspaceFilter(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{"main.tf": okTF, "terraform.tfvars": "x = 1\n", "README.md": "# notes\n",
		"terraform.tfstate": "{}", ".terraform.lock.hcl": ""} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mustMkdir(t, filepath.Join(dir, ".terraform"))
	files, err := ReadWorkspace(dir, testOpts)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 3 || files["README.md"] != nil || files["terraform.tfstate"] != nil {
		t.Fatalf("files = %v", files)
	}
	cm := map[string]string{}
	for n, d := range files {
		cm[n] = string(d)
	}
	if _, err := CheckDir(harness.ConfigMapVolume(t, t.TempDir(), cm), testOpts); err != nil {
		t.Errorf("what the server reads, the sandbox refuses: %v", err)
	}

	if err := os.WriteFile(filepath.Join(dir, "override.tf"), []byte(okTF), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadWorkspace(dir, testOpts); err == nil || !strings.Contains(err.Error(), "override") {
		t.Errorf("an override file was passed over instead of refused: %v", err)
	}
	if _, err := ReadWorkspace(filepath.Join(dir, "nope"), testOpts); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing folder: %v", err)
	}
}
