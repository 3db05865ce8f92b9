package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	digest "github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/agent-sandbox/agent-sandbox/internal/atomicfile"
)

// The release writes OCI image layouts (https://github.com/opencontainers/image-spec/blob/v1.1.1/image-layout.md)
// by hand rather than through a library's image model: every byte of every manifest, config and index is then
// ours to fix, which is what makes the digests reproducible, and artifact manifests (SBOMs, the Helm chart)
// need no special casing.

// store holds content-addressed blobs in memory, as a registry would.
type store struct {
	blobs map[digest.Digest][]byte
}

func newStore() *store { return &store{blobs: map[digest.Digest][]byte{}} }

// put stores data and returns its descriptor.
func (s *store) put(mediaType string, data []byte) ocispec.Descriptor {
	d := digest.FromBytes(data)
	s.blobs[d] = data
	return ocispec.Descriptor{MediaType: mediaType, Digest: d, Size: int64(len(data))}
}

// putJSON stores v as JSON (encoding/json: struct fields in declaration order, map keys sorted, so the same
// value always gives the same bytes).
func (s *store) putJSON(mediaType string, v any) (ocispec.Descriptor, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	return s.put(mediaType, b), nil
}

// get returns a blob, or an error naming the digest.
func (s *store) get(d digest.Digest) ([]byte, error) {
	b, ok := s.blobs[d]
	if !ok {
		return nil, fmt.Errorf("blob %s is not in the store", d)
	}
	return b, nil
}

// closure returns every blob a root reaches (an index reaches its manifests, a manifest its config and
// layers), sorted by digest. A manifest's subject is a reference back to another root, not content of it.
func (s *store) closure(roots ...ocispec.Descriptor) ([]digest.Digest, error) {
	seen := map[digest.Digest]bool{}
	var walk func(d ocispec.Descriptor) error
	walk = func(d ocispec.Descriptor) error {
		if seen[d.Digest] {
			return nil
		}
		b, err := s.get(d.Digest)
		if err != nil {
			return err
		}
		seen[d.Digest] = true
		switch d.MediaType {
		case ocispec.MediaTypeImageIndex:
			var idx ocispec.Index
			if err := json.Unmarshal(b, &idx); err != nil {
				return fmt.Errorf("index %s: %w", d.Digest, err)
			}
			for _, m := range idx.Manifests {
				if err := walk(m); err != nil {
					return err
				}
			}
		case ocispec.MediaTypeImageManifest:
			var m ocispec.Manifest
			if err := json.Unmarshal(b, &m); err != nil {
				return fmt.Errorf("manifest %s: %w", d.Digest, err)
			}
			if err := walk(m.Config); err != nil {
				return err
			}
			for _, l := range m.Layers {
				if err := walk(l); err != nil {
					return err
				}
			}
		}
		return nil
	}
	for _, r := range roots {
		if err := walk(r); err != nil {
			return nil, err
		}
	}
	out := make([]digest.Digest, 0, len(seen))
	for d := range seen {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}

// layoutFiles returns the files of an OCI image layout whose index.json lists roots, by path.
func (s *store) layoutFiles(roots []ocispec.Descriptor) (map[string][]byte, error) {
	idx := ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageIndex, Manifests: roots}
	ib, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return nil, err
	}
	lb, err := json.Marshal(ocispec.ImageLayout{Version: ocispec.ImageLayoutVersion})
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{ocispec.ImageLayoutFile: lb, ocispec.ImageIndexFile: append(ib, '\n')}
	blobs, err := s.closure(roots...)
	if err != nil {
		return nil, err
	}
	for _, d := range blobs {
		files[blobPath(d)] = s.blobs[d]
	}
	return files, nil
}

func blobPath(d digest.Digest) string { return "blobs/" + d.Algorithm().String() + "/" + d.Encoded() }

// writeLayout writes an OCI image layout into dir, replacing what was there.
func (s *store) writeLayout(dir string, roots []ocispec.Descriptor) error {
	files, err := s.layoutFiles(roots)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	for _, name := range sortedKeys(files) {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, files[name], 0o644); err != nil {
			return err
		}
	}
	return nil
}

// writeTar writes files as a tar archive at path, reproducibly: sorted names, no directories, mode 0644,
// owner 0:0, every time mtime.
func writeTar(path string, files map[string][]byte, mtime time.Time) error {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, name := range sortedKeys(files) {
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(files[name])), ModTime: mtime, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := tw.Write(files[name]); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return writeFileAtomic(path, buf.Bytes())
}

// dockerArchiveFiles adds to an OCI layout's files the manifest.json of a docker-archive (`docker save`
// format, as Docker 25 and later write it: the same blobs serve both formats), so that one file loads with
// `docker load`, `podman load` and `ctr images import`. m must be a single-platform image manifest.
func (s *store) dockerArchiveFiles(m ocispec.Descriptor, repoTag string) (map[string][]byte, error) {
	b, err := s.get(m.Digest)
	if err != nil {
		return nil, err
	}
	var man ocispec.Manifest
	if err := json.Unmarshal(b, &man); err != nil {
		return nil, err
	}
	root := m
	root.Platform = nil
	files, err := s.layoutFiles([]ocispec.Descriptor{root})
	if err != nil {
		return nil, err
	}
	type entry struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	e := entry{Config: blobPath(man.Config.Digest), RepoTags: []string{repoTag}}
	for _, l := range man.Layers {
		e.Layers = append(e.Layers, blobPath(l.Digest))
	}
	mb, err := json.Marshal([]entry{e})
	if err != nil {
		return nil, err
	}
	files["manifest.json"] = mb
	return files, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// writeFileAtomic writes data to path through a temporary file, so that an interrupted release never
// leaves a truncated artifact under its final name.
func writeFileAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(path, data, 0o644)
}

// sha256Hex is the hex SHA-256 of b.
func sha256Hex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// layersSize is the sum of a manifest's (compressed) layer sizes: what a node downloads for it.
func (s *store) layersSize(m ocispec.Descriptor) (int64, error) {
	b, err := s.get(m.Digest)
	if err != nil {
		return 0, err
	}
	var man ocispec.Manifest
	if err := json.Unmarshal(b, &man); err != nil {
		return 0, err
	}
	var n int64
	for _, l := range man.Layers {
		n += l.Size
	}
	return n, nil
}
