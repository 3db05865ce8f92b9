// Package imagelayer is the content of one container image layer, built without a container engine and
// written as a tar stream that depends on nothing but that content: the release's images (scripts/release)
// and the local cluster's (scripts/imagebuild) are both made of it.
//
// Everything that makes two builds of the same inputs differ is fixed when the layer is written: entries
// are sorted by path, every parent directory exists, all times are the one time given, owners are 0:0
// unless an entry says otherwise, and nothing of the build machine (user names, device numbers, access
// times) is recorded.
package imagelayer

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Tree is the content of one layer: file system objects by their path (no leading slash). Adding an object
// at a path that holds one already replaces it.
type Tree struct {
	entries map[string]*Entry
}

// Entry is one file system object of a Tree.
type Entry struct {
	// Type is tar.TypeReg, tar.TypeDir or tar.TypeSymlink.
	Type     byte
	Mode     int64
	UID, GID int
	// Data is a regular file's content.
	Data []byte
	// Link is a symlink's target.
	Link string
	// Source is where a copied file came from on the build machine, for error messages and the SBOM.
	Source string
}

// NewTree returns an empty tree.
func NewTree() *Tree { return &Tree{entries: map[string]*Entry{}} }

// clean turns an image path into the form the tree keys by: slash-separated, no leading slash.
func clean(p string) string { return strings.TrimPrefix(path.Clean("/"+p), "/") }

// Entry returns the object at the image path p, or nil.
func (t *Tree) Entry(p string) *Entry { return t.entries[clean(p)] }

// AddFile adds a regular file with the given content.
func (t *Tree) AddFile(dest string, mode int64, data []byte) {
	t.entries[clean(dest)] = &Entry{Type: tar.TypeReg, Mode: mode, Data: data}
}

// CopyFile adds the file at src (following symlinks) as dest.
func (t *Tree) CopyFile(dest, src string, mode int64) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	t.entries[clean(dest)] = &Entry{Type: tar.TypeReg, Mode: mode, Data: data, Source: src}
	return nil
}

// AddDir adds a directory owned by uid:gid.
func (t *Tree) AddDir(dest string, mode int64, uid, gid int) {
	t.entries[clean(dest)] = &Entry{Type: tar.TypeDir, Mode: mode, UID: uid, GID: gid}
}

// AddSymlink adds a symlink to target.
func (t *Tree) AddSymlink(dest, target string) {
	t.entries[clean(dest)] = &Entry{Type: tar.TypeSymlink, Mode: 0o777, Link: target}
}

// CopyTree adds the tree at src under dest: directories with mode 0755, symlinks as they are, and regular
// files with the mode fileMode gives for their mode on the build machine. Anything else (a device, a pipe,
// a socket) is an error.
func (t *Tree) CopyTree(dest, src string, fileMode func(fs.FileMode) int64) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := path.Join(dest, filepath.ToSlash(rel))
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			t.AddDir(target, 0o755, 0, 0)
		case info.Mode()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			t.AddSymlink(target, l)
		case info.Mode().IsRegular():
			return t.CopyFile(target, p, fileMode(info.Mode()))
		default:
			return fmt.Errorf("%s: not a regular file, directory or symlink", p)
		}
		return nil
	})
}

// Normalised is a CopyTree file mode that keeps only whether a file is executable: 0755 for executables and
// 0644 for the rest, so that the build machine's umask does not reach the image.
func Normalised(m fs.FileMode) int64 {
	if m.Perm()&0o111 != 0 {
		return 0o755
	}
	return 0o644
}

// Permissions is a CopyTree file mode that keeps a file's permission bits as they are on the build machine.
func Permissions(m fs.FileMode) int64 { return int64(m.Perm()) }

// Merge adds every entry of o, replacing entries of the same path.
func (t *Tree) Merge(o *Tree) {
	for k, v := range o.entries {
		t.entries[k] = v
	}
}

// Files returns the paths of the regular files, sorted.
func (t *Tree) Files() []string {
	var out []string
	for n, e := range t.entries {
		if e.Type == tar.TypeReg {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// Tar writes the tree as an uncompressed tar stream, reproducibly (see the package comment), with every
// time set to mtime.
func (t *Tree) Tar(mtime time.Time) ([]byte, error) {
	all := map[string]*Entry{}
	for n, e := range t.entries {
		all[n] = e
		for d := path.Dir(n); d != "." && d != "/"; d = path.Dir(d) {
			if _, ok := t.entries[d]; !ok {
				all[d] = &Entry{Type: tar.TypeDir, Mode: 0o755}
			}
		}
	}
	names := make([]string, 0, len(all))
	for n := range all {
		if n == "" || n == "." {
			continue
		}
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		e := all[n]
		hdr := &tar.Header{
			Typeflag: e.Type,
			Name:     n,
			Linkname: e.Link,
			Mode:     e.Mode,
			Uid:      e.UID,
			Gid:      e.GID,
			ModTime:  mtime,
			Format:   tar.FormatPAX,
		}
		if e.Type == tar.TypeDir {
			hdr.Name += "/"
		}
		if e.Type == tar.TypeReg {
			hdr.Size = int64(len(e.Data))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("tar %s: %w", n, err)
		}
		if e.Type == tar.TypeReg {
			if _, err := tw.Write(e.Data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
