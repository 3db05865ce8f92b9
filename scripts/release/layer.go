package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// fileTree is the content of one image layer: file system objects by their path (no leading slash).
// Everything that makes two builds of the same inputs differ is fixed when the layer is written: entries
// are sorted by path, every parent directory exists, times are the release's SOURCE_DATE_EPOCH, owners are
// 0:0 unless an entry says otherwise, and nothing of the build machine (user names, device numbers, access
// times) is recorded.
type fileTree struct {
	entries map[string]*treeEntry
}

type treeEntry struct {
	typ      byte // tar.TypeReg, tar.TypeDir or tar.TypeSymlink
	mode     int64
	uid, gid int
	data     []byte
	link     string
	// source is where the file came from on the build machine, for error messages and the SBOM.
	source string
}

func newFileTree() *fileTree { return &fileTree{entries: map[string]*treeEntry{}} }

// clean turns an image path into the form the tree keys by: slash-separated, no leading slash.
func clean(p string) string { return strings.TrimPrefix(path.Clean("/"+p), "/") }

// addFile adds a regular file with the given content.
func (t *fileTree) addFile(dest string, mode int64, data []byte) {
	t.entries[clean(dest)] = &treeEntry{typ: tar.TypeReg, mode: mode, data: data}
}

// copyFile adds the file at src (following symlinks) as dest.
func (t *fileTree) copyFile(dest, src string, mode int64) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	t.entries[clean(dest)] = &treeEntry{typ: tar.TypeReg, mode: mode, data: data, source: src}
	return nil
}

// addDir adds a directory owned by uid:gid.
func (t *fileTree) addDir(dest string, mode int64, uid, gid int) {
	t.entries[clean(dest)] = &treeEntry{typ: tar.TypeDir, mode: mode, uid: uid, gid: gid}
}

// copyTree adds the tree at src under dest. Files keep only their permission bits, normalised to 0755 for
// executables and 0644 for the rest, so that the build machine's umask does not reach the image.
func (t *fileTree) copyTree(dest, src string) error {
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
			t.addDir(target, 0o755, 0, 0)
		case info.Mode()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			t.entries[clean(target)] = &treeEntry{typ: tar.TypeSymlink, mode: 0o777, link: l}
		case info.Mode().IsRegular():
			mode := int64(0o644)
			if info.Mode().Perm()&0o111 != 0 {
				mode = 0o755
			}
			return t.copyFile(target, p, mode)
		default:
			return fmt.Errorf("%s: not a regular file, directory or symlink", p)
		}
		return nil
	})
}

// merge adds every entry of o, replacing entries of the same path.
func (t *fileTree) merge(o *fileTree) {
	for k, v := range o.entries {
		t.entries[k] = v
	}
}

// files returns the paths of the regular files, sorted.
func (t *fileTree) files() []string {
	var out []string
	for n, e := range t.entries {
		if e.typ == tar.TypeReg {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// tar writes the tree as an uncompressed tar stream, reproducibly (see fileTree).
func (t *fileTree) tar(mtime time.Time) ([]byte, error) {
	all := map[string]*treeEntry{}
	for n, e := range t.entries {
		all[n] = e
		for d := path.Dir(n); d != "." && d != "/"; d = path.Dir(d) {
			if _, ok := t.entries[d]; !ok {
				all[d] = &treeEntry{typ: tar.TypeDir, mode: 0o755}
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
			Typeflag: e.typ,
			Name:     n,
			Linkname: e.link,
			Mode:     e.mode,
			Uid:      e.uid,
			Gid:      e.gid,
			ModTime:  mtime,
			Format:   tar.FormatPAX,
		}
		if e.typ == tar.TypeDir {
			hdr.Name += "/"
		}
		if e.typ == tar.TypeReg {
			hdr.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("tar %s: %w", n, err)
		}
		if e.typ == tar.TypeReg {
			if _, err := tw.Write(e.data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// gzipBytes compresses b with a header that records no name and no time, so that the result depends on b
// (and the Go version's compress/gzip) only.
func gzipBytes(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.DefaultCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
