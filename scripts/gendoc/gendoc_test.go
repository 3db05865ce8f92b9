package gendoc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUpdate: without check the file is written; with check an equal file passes and a different one fails
// with the command that rewrites it, and is left as it was.
func TestUpdate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "doc.md")
	if err := Update(path, []byte("one\n"), false, "make docs"); err != nil {
		t.Fatal(err)
	}
	if err := Update(path, []byte("one\n"), true, "make docs"); err != nil {
		t.Errorf("check of an up-to-date file: %v", err)
	}
	err := Update(path, []byte("two\n"), true, "make docs")
	if err == nil || !strings.Contains(err.Error(), "doc.md is out of date: run make docs") {
		t.Errorf("check of a stale file: %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "one\n" {
		t.Errorf("check wrote the file: %q", b)
	}
}
