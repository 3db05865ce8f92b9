package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestListImages: the lines release-import.sh reads, one per image, from what a build writes; a missing or
// broken release.json, or a value that would split a line, is refused.
func TestListImages(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, "release.json"), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	if err := listImages(&out, dir); err == nil {
		t.Error("no release.json: no error")
	}
	write(`{"images":[{"name":"w","repository":"ghcr.io/a/agent-sandbox-webhook","tag":"v1","archive":"images/w-v1.oci.tar","digest":"sha256:ab"},` +
		`{"name":"r","repository":"ghcr.io/a/agent-sandbox-runner","tag":"v1","archive":"images/r-v1.oci.tar","digest":"sha256:cd"}]}`)
	if err := listImages(&out, dir); err != nil {
		t.Fatal(err)
	}
	want := "ghcr.io/a/agent-sandbox-webhook v1 images/w-v1.oci.tar sha256:ab\nghcr.io/a/agent-sandbox-runner v1 images/r-v1.oci.tar sha256:cd\n"
	if out.String() != want {
		t.Errorf("got %q\nwant %q", out.String(), want)
	}
	for _, bad := range []string{`{"images":[]}`, `not json`, `{"images":[{"repository":"a b","tag":"v1","archive":"x","digest":"d"}]}`,
		`{"images":[{"repository":"a","tag":"","archive":"x","digest":"d"}]}`} {
		write(bad)
		out.Reset()
		if err := listImages(&out, dir); err == nil || out.Len() != 0 {
			t.Errorf("%s: err %v, printed %q", bad, err, out.String())
		}
	}
}
