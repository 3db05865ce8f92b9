package harness

import (
	"os"
	"path/filepath"
	"testing"
)

// ConfigMapVolume lays files out in dir (made if missing) the way the kubelet writes a ConfigMap volume:
// the data in a timestamped folder, ..data a link to it, and each key a link through ..data. It returns
// dir.
func ConfigMapVolume(t testing.TB, dir string, files map[string]string) string {
	t.Helper()
	stamp := "..2026_11_30_12_00_00.000000001"
	if err := os.MkdirAll(filepath.Join(dir, stamp), 0o755); err != nil {
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
