package main

import (
	"bytes"
	"debug/elf"
	"fmt"
	"sort"
	"strings"
	"time"

	digest "github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/agent-sandbox/agent-sandbox/scripts/imagelayer"
)

// platform is one OS/architecture an image is built for. Only linux is supported: the images run on
// Kubernetes nodes.
type platform struct{ OS, Arch string }

func (p platform) String() string { return p.OS + "/" + p.Arch }

// slug is the platform as it appears in file names: linux-amd64.
func (p platform) slug() string { return p.OS + "-" + p.Arch }

func parsePlatform(s string) (platform, error) {
	os, arch, ok := strings.Cut(s, "/")
	if !ok || os != "linux" || (arch != "amd64" && arch != "arm64") {
		return platform{}, fmt.Errorf("platform %q: want linux/amd64 or linux/arm64", s)
	}
	return platform{OS: os, Arch: arch}, nil
}

// elfMachine is the ELF machine of each supported architecture: every binary put into an image is
// checked against its platform, so that an amd64 Terraform can never end up in an arm64 image.
var elfMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// checkArch fails unless data is an ELF executable for arch.
func checkArch(name string, data []byte, arch string) error {
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("%s is not an ELF binary: %w", name, err)
	}
	if f.Machine != elfMachine[arch] {
		return fmt.Errorf("%s is built for %s, not for %s", name, f.Machine, arch)
	}
	return nil
}

// layerSpec is one layer of an image: its files and the history line that says what it holds.
type layerSpec struct {
	tree    *imagelayer.Tree
	comment string
}

// imageConfig is what an image runs: the parts of the OCI image config the release sets.
type imageConfig struct {
	Entrypoint []string
	Cmd        []string
	Env        []string
	User       string
	WorkingDir string
	Labels     map[string]string
}

// builtLayer is a layer written into the store, with the digest of its uncompressed tar (its diff ID).
type builtLayer struct {
	desc   ocispec.Descriptor
	diffID digest.Digest
}

// layerCache writes each distinct layer once: the webhook, the credential agent and the runner share their
// first layer, so it is compressed once and stored once.
type layerCache map[string]builtLayer

// buildLayer writes a layer into the store (gzip-compressed tar), reusing an identical one built before.
func (s *store) buildLayer(cache layerCache, l layerSpec, mtime time.Time) (builtLayer, error) {
	raw, err := l.tree.Tar(mtime)
	if err != nil {
		return builtLayer{}, err
	}
	diffID := digest.FromBytes(raw)
	if b, ok := cache[diffID.String()]; ok {
		return b, nil
	}
	gz, err := gzipBytes(raw)
	if err != nil {
		return builtLayer{}, err
	}
	b := builtLayer{desc: s.put(ocispec.MediaTypeImageLayerGzip, gz), diffID: diffID}
	cache[diffID.String()] = b
	return b, nil
}

// buildImage writes one single-platform image (config and manifest) and returns the manifest's descriptor,
// with its platform set.
func (s *store) buildImage(cache layerCache, p platform, cfg imageConfig, layers []layerSpec, created time.Time) (ocispec.Descriptor, error) {
	img := ocispec.Image{
		Created:  &created,
		Platform: ocispec.Platform{OS: p.OS, Architecture: p.Arch},
		Config: ocispec.ImageConfig{
			User:       cfg.User,
			Env:        cfg.Env,
			Entrypoint: cfg.Entrypoint,
			Cmd:        cfg.Cmd,
			WorkingDir: cfg.WorkingDir,
			Labels:     cfg.Labels,
		},
		RootFS: ocispec.RootFS{Type: "layers"},
	}
	man := ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest}
	for _, l := range layers {
		b, err := s.buildLayer(cache, l, created)
		if err != nil {
			return ocispec.Descriptor{}, err
		}
		img.RootFS.DiffIDs = append(img.RootFS.DiffIDs, b.diffID)
		img.History = append(img.History, ocispec.History{Created: &created, CreatedBy: "agent-sandbox release", Comment: l.comment})
		man.Layers = append(man.Layers, b.desc)
	}
	var err error
	if man.Config, err = s.putJSON(ocispec.MediaTypeImageConfig, img); err != nil {
		return ocispec.Descriptor{}, err
	}
	desc, err := s.putJSON(ocispec.MediaTypeImageManifest, man)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	desc.Platform = &ocispec.Platform{OS: p.OS, Architecture: p.Arch}
	return desc, nil
}

// buildIndex writes an image index over single-platform manifests (sorted by platform) and returns its
// descriptor.
func (s *store) buildIndex(manifests []ocispec.Descriptor, annotations map[string]string) (ocispec.Descriptor, error) {
	ms := append([]ocispec.Descriptor(nil), manifests...)
	sort.Slice(ms, func(i, j int) bool {
		return ms[i].Platform.OS+"/"+ms[i].Platform.Architecture < ms[j].Platform.OS+"/"+ms[j].Platform.Architecture
	})
	idx := ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageIndex, Manifests: ms, Annotations: annotations}
	return s.putJSON(ocispec.MediaTypeImageIndex, idx)
}

// artifactManifest writes an OCI 1.1 artifact manifest: one blob of blobType, an empty config, and
// optionally a subject (the manifest it refers to, which makes it a referrer of that manifest).
func (s *store) artifactManifest(artifactType string, blob ocispec.Descriptor, subject *ocispec.Descriptor, annotations map[string]string) (ocispec.Descriptor, error) {
	empty := s.put(ocispec.MediaTypeEmptyJSON, []byte("{}"))
	empty.Data = []byte("{}")
	man := ocispec.Manifest{
		Versioned:    specs.Versioned{SchemaVersion: 2},
		MediaType:    ocispec.MediaTypeImageManifest,
		ArtifactType: artifactType,
		Config:       empty,
		Layers:       []ocispec.Descriptor{blob},
		Annotations:  annotations,
	}
	if subject != nil {
		sub := ocispec.Descriptor{MediaType: subject.MediaType, Digest: subject.Digest, Size: subject.Size}
		man.Subject = &sub
	}
	desc, err := s.putJSON(ocispec.MediaTypeImageManifest, man)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	desc.ArtifactType = artifactType
	return desc, nil
}
