package imagelayer

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestCopyTree: a copied tree keeps its symlinks, gets 0755 directories, and its files' modes are what the
// mode function says; the tar stream has every parent directory, in path order, with the one time given.
func TestCopyTree(t *testing.T) {
	src := t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "sub", "run"), []byte("x"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "data"), []byte("d"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("data", filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	// Modes as written, whatever the umask.
	if err := errors.Join(os.Chmod(filepath.Join(src, "sub", "run"), 0o750), os.Chmod(filepath.Join(src, "data"), 0o600)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		mode      func(os.FileMode) int64
		run, data int64
	}{{"Normalised", Normalised, 0o755, 0o644}, {"Permissions", Permissions, 0o750, 0o600}} {
		tree := NewTree()
		if err := tree.CopyTree("/opt/t", src, tc.mode); err != nil {
			t.Fatal(err)
		}
		if e := tree.Entry("opt/t/sub/run"); e == nil || e.Mode != tc.run || e.Source != filepath.Join(src, "sub", "run") {
			t.Errorf("%s: sub/run: %+v", tc.name, e)
		}
		if e := tree.Entry("/opt/t/data"); e == nil || e.Mode != tc.data {
			t.Errorf("%s: data: %+v", tc.name, e)
		}
		if e := tree.Entry("/opt/t/link"); e == nil || e.Type != tar.TypeSymlink || e.Link != "data" {
			t.Errorf("%s: link: %+v", tc.name, e)
		}
		raw, err := tree.Tar(time.Unix(7, 0))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		tr := tar.NewReader(bytes.NewReader(raw))
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if !h.ModTime.Equal(time.Unix(7, 0)) {
				t.Errorf("%s: %s has time %v", tc.name, h.Name, h.ModTime)
			}
			names = append(names, h.Name)
		}
		want := []string{"opt/", "opt/t/", "opt/t/data", "opt/t/link", "opt/t/sub/", "opt/t/sub/run"}
		if len(names) != len(want) {
			t.Fatalf("%s: entries %q, want %q", tc.name, names, want)
		}
		for i := range want {
			if names[i] != want[i] {
				t.Errorf("%s: entries %q, want %q", tc.name, names, want)
				break
			}
		}
	}
}
