package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestWriteReplacesWholeWithExactMode: the new content replaces the old under exactly the mode asked
// for, whatever the umask, and no temporary file stays behind.
func TestWriteReplacesWholeWithExactMode(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := os.WriteFile(path, []byte("old content"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, perm := range []os.FileMode{0o644, 0o600, 0o400} {
		if err := Write(path, []byte("new"), perm); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != perm {
			t.Errorf("mode %v, want %v", fi.Mode().Perm(), perm)
		}
		if b, _ := os.ReadFile(path); string(b) != "new" {
			t.Errorf("content %q", b)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("left behind: %v", entries)
	}
}

// TestWriteFailureLeavesTheOldFile: a failed write (here: the target is a folder) keeps what was there
// and removes its temporary file.
func TestWriteFailureLeavesTheOldFile(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "d")
	if err := os.Mkdir(target, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(target, "keep"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Write(target, []byte("x"), 0o600); err == nil {
		t.Fatal("renaming a file over a non-empty folder succeeded")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("left behind: %v", entries)
	}
	if err := Write(filepath.Join(dir, "missing", "f"), []byte("x"), 0o600); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing folder: %v, want fs.ErrNotExist", err)
	}
}

// TestWriteOwner: WithOwner gives the file to that user; as anyone but root, giving it to another user fails
// and nothing is written.
func TestWriteOwner(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	me := &Owner{UID: os.Getuid(), GID: os.Getgid()}
	if err := Write(path, []byte("x"), 0o600, WithOwner(me)); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		return
	}
	if err := Write(path+"2", []byte("x"), 0o600, WithOwner(&Owner{UID: 0, GID: 0})); err == nil {
		t.Error("a non-root writer gave a file to root")
	}
	if _, err := os.Stat(path + "2"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the refused file exists: %v", err)
	}
}
