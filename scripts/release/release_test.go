package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/validate"
	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"sigs.k8s.io/yaml"

	"github.com/agent-sandbox/agent-sandbox/scripts/imagelayer"
)

var epoch = time.Unix(1764590400, 0).UTC()

// testBinary is a real Go executable with build info: the test binary itself.
func testBinary(t *testing.T) []byte {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// tinyRelease builds a two-platform image with an SBOM referrer per platform into a fresh store, the way
// build does, and returns the store, the named index descriptor and the layout's roots.
func tinyRelease(t *testing.T, binary []byte) (*store, ocispec.Descriptor, []ocispec.Descriptor) {
	t.Helper()
	st := newStore()
	cache := layerCache{}
	o := &options{Version: "v0.0.1-test", Commit: strings.Repeat("a", 40), epoch: epoch}
	def := releaseImages[0]
	var manifests, roots []ocispec.Descriptor
	for _, p := range []platform{{"linux", "arm64"}, {"linux", "amd64"}} {
		layers := []layerSpec{{tree: baseTree(binary, []byte("-----BEGIN CERTIFICATE-----\n")), comment: "base"}}
		m, err := st.buildImage(cache, p, o.imageConfig(def), layers, epoch)
		if err != nil {
			t.Fatal(err)
		}
		manifests = append(manifests, m)
		sbom, err := buildSBOM(sbomInput{Repository: "example.com/x/" + def.Name, Version: o.Version, Platform: p, ManifestDigest: m.Digest.String(),
			Tree: layers[0].tree, Versions: map[string]string{binaryPath: o.Version}, Created: epoch, Tool: "test",
			Packages: map[string]filePackage{"/etc/ssl/certs/ca-certificates.crt": {Name: "ca-certificates", Version: "1"}}})
		if err != nil {
			t.Fatal(err)
		}
		ref, err := st.artifactManifest(spdxArtifactType, st.put(spdxMediaType, sbom), &m, nil)
		if err != nil {
			t.Fatal(err)
		}
		roots = append(roots, ref)
	}
	idx, err := st.buildIndex(manifests, o.labels(def))
	if err != nil {
		t.Fatal(err)
	}
	idx.Annotations = map[string]string{ocispec.AnnotationRefName: o.Version}
	return st, idx, append([]ocispec.Descriptor{idx}, roots...)
}

// TestImageLayout writes a tiny two-platform image with SBOM referrers as an OCI layout and checks it the
// way a consumer would: go-containerregistry reads it back and validates every digest, size and diff ID;
// the index lists both platforms in order; the layers are reproducible tar files owned by root.
// tarEntry is one entry of a tar stream, with its content.
type tarEntry struct {
	hdr  *tar.Header
	data []byte
}

// tarEntries reads every entry of the tar stream r, in order.
func tarEntries(t *testing.T, r io.Reader) []tarEntry {
	t.Helper()
	tr := tar.NewReader(r)
	var out []tarEntry
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tarEntry{hdr: h, data: data})
	}
}

func TestImageLayout(t *testing.T) {
	bin := []byte("not an ELF binary")
	st, idx, roots := tinyRelease(t, bin)
	dir := filepath.Join(t.TempDir(), "layout")
	if err := st.writeLayout(dir, roots); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "oci-layout")); string(b) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout = %s", b)
	}
	// Every blob is stored under its own digest.
	blobs, _ := filepath.Glob(filepath.Join(dir, "blobs", "sha256", "*"))
	for _, f := range blobs {
		b, _ := os.ReadFile(f)
		if got := digest.FromBytes(b).Encoded(); got != filepath.Base(f) {
			t.Errorf("blob %s has digest %s", filepath.Base(f), got)
		}
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	ii, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := ii.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 3 || im.Manifests[0].Digest.String() != idx.Digest.String() || im.Manifests[0].Annotations[ocispec.AnnotationRefName] != "v0.0.1-test" {
		t.Fatalf("index.json = %+v, want the image index (named) and two SBOM referrers", im.Manifests)
	}
	images, err := ii.ImageIndex(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Index(images); err != nil {
		t.Errorf("the image index does not validate: %v", err)
	}
	inner, _ := images.IndexManifest()
	if len(inner.Manifests) != 2 || inner.Manifests[0].Platform.Architecture != "amd64" || inner.Manifests[1].Platform.Architecture != "arm64" {
		t.Errorf("platforms = %+v, want amd64 then arm64", inner.Manifests)
	}
	for _, m := range inner.Manifests {
		img, err := images.Image(m.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Config.User != "65532:65532" || !reflect.DeepEqual(cf.Config.Entrypoint, []string{"/agent-sandbox"}) || !cf.Created.Time.Equal(epoch) ||
			cf.Architecture != m.Platform.Architecture || cf.Config.Labels[ocispec.AnnotationRevision] != strings.Repeat("a", 40) {
			t.Errorf("config of %s: %+v", m.Platform.Architecture, cf)
		}
		layers, _ := img.Layers()
		if len(layers) != 1 {
			t.Fatalf("%d layers", len(layers))
		}
		rc, err := layers[0].Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range tarEntries(t, rc) {
			h := e.hdr
			names = append(names, h.Name)
			if !h.ModTime.Equal(epoch) || h.Uname != "" || h.Gname != "" {
				t.Errorf("%s: mtime %v, owner %q:%q; want the release time and no names", h.Name, h.ModTime, h.Uname, h.Gname)
			}
			if want := 0; h.Name != "home/nonroot/" && (h.Uid != want || h.Gid != want) {
				t.Errorf("%s owned by %d:%d, want 0:0", h.Name, h.Uid, h.Gid)
			}
			if h.Name == "home/nonroot/" && (h.Uid != 65532 || h.Gid != 65532) {
				t.Errorf("home/nonroot/ owned by %d:%d, want 65532", h.Uid, h.Gid)
			}
			if h.Name == "agent-sandbox" && (!bytes.Equal(e.data, bin) || h.Mode != 0o755) {
				t.Errorf("agent-sandbox: mode %o, content %q", h.Mode, e.data)
			}
		}
		want := []string{"agent-sandbox", "etc/", "etc/group", "etc/passwd", "etc/ssl/", "etc/ssl/certs/", "etc/ssl/certs/ca-certificates.crt", "home/", "home/nonroot/", "root/", "tmp/"}
		if !reflect.DeepEqual(names, want) {
			t.Errorf("layer entries = %v, want (sorted, with parents) %v", names, want)
		}
	}
	for _, d := range im.Manifests[1:] {
		if d.ArtifactType != spdxArtifactType {
			t.Errorf("root %s: artifactType %q", d.Digest, d.ArtifactType)
		}
		b, _ := os.ReadFile(filepath.Join(dir, "blobs", "sha256", d.Digest.Hex))
		var m ocispec.Manifest
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		if m.Subject == nil || (m.Subject.Digest.String() != inner.Manifests[0].Digest.String() && m.Subject.Digest.String() != inner.Manifests[1].Digest.String()) {
			t.Errorf("SBOM referrer %s has subject %+v, want one of the platform manifests", d.Digest, m.Subject)
		}
		if m.Config.MediaType != ocispec.MediaTypeEmptyJSON || len(m.Layers) != 1 || m.Layers[0].MediaType != spdxMediaType {
			t.Errorf("SBOM referrer %s: %+v", d.Digest, m)
		}
	}
}

// TestReproducible: two builds of the same inputs give byte-identical layouts, whatever order the files
// were added in; a different time gives a different image.
func TestReproducible(t *testing.T) {
	bin := []byte("not an ELF binary")
	files := func(epochShift time.Duration) map[string][]byte {
		st, _, roots := tinyRelease(t, bin)
		if epochShift != 0 {
			st = newStore()
			m, err := st.buildImage(layerCache{}, platform{"linux", "amd64"}, imageConfig{}, []layerSpec{{tree: baseTree(bin, nil)}}, epoch.Add(epochShift))
			if err != nil {
				t.Fatal(err)
			}
			roots = []ocispec.Descriptor{m}
		}
		f, err := st.layoutFiles(roots)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	a, b := files(0), files(0)
	if !reflect.DeepEqual(a, b) {
		t.Error("two builds of the same image differ")
	}
	if reflect.DeepEqual(a, files(time.Second)) {
		t.Error("a different SOURCE_DATE_EPOCH gave the same files")
	}

	t1, t2 := imagelayer.NewTree(), imagelayer.NewTree()
	t1.AddFile("/b/x", 0o644, []byte("x"))
	t1.AddFile("/a", 0o755, []byte("a"))
	t2.AddFile("/a", 0o755, []byte("a"))
	t2.AddFile("b/x", 0o644, []byte("x"))
	r1, _ := t1.Tar(epoch)
	r2, _ := t2.Tar(epoch)
	if !bytes.Equal(r1, r2) {
		t.Error("the layer depends on the order files were added in")
	}
	g1, _ := gzipBytes(r1)
	g2, _ := gzipBytes(r2)
	if !bytes.Equal(g1, g2) {
		t.Error("gzip output differs for the same input")
	}
	zr, err := gzip.NewReader(bytes.NewReader(g1))
	if err != nil {
		t.Fatal(err)
	}
	if zr.Name != "" || !zr.ModTime.IsZero() {
		t.Errorf("gzip header records name %q, time %v", zr.Name, zr.ModTime)
	}
}

// TestDockerArchive: the single-platform archive is both an OCI layout (index.json names the image for
// containerd) and a docker-archive (manifest.json points at blobs the archive holds).
func TestDockerArchive(t *testing.T) {
	st, _, _ := tinyRelease(t, []byte("not an ELF binary"))
	m, err := st.buildImage(layerCache{}, platform{"linux", "amd64"}, imageConfig{}, []layerSpec{{tree: baseTree([]byte("not an ELF binary"), nil)}}, epoch)
	if err != nil {
		t.Fatal(err)
	}
	files, err := st.dockerArchiveFiles(m, "example.com/x/img:v1")
	if err != nil {
		t.Fatal(err)
	}
	files = nameArchiveRoot(files, "example.com/x/img", "v1")
	var entries []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(files["manifest.json"], &entries); err != nil || len(entries) != 1 {
		t.Fatalf("manifest.json: %v %s", err, files["manifest.json"])
	}
	for _, f := range append([]string{entries[0].Config}, entries[0].Layers...) {
		if _, ok := files[f]; !ok {
			t.Errorf("manifest.json names %s, which the archive does not hold", f)
		}
	}
	var idx ocispec.Index
	if err := json.Unmarshal(files["index.json"], &idx); err != nil || len(idx.Manifests) != 1 || idx.Manifests[0].Annotations["io.containerd.image.name"] != "example.com/x/img:v1" ||
		idx.Manifests[0].Annotations[ocispec.AnnotationRefName] != "v1" {
		t.Errorf("index.json = %s", files["index.json"])
	}
	out := filepath.Join(t.TempDir(), "a.tar")
	if err := writeTar(out, files, epoch); err != nil {
		t.Fatal(err)
	}
}

// TestSBOM: the SPDX document names the image by its manifest digest, the binary with its version, and
// the modules read from the binary's build info (here: the test binary, which links go-containerregistry).
func TestSBOM(t *testing.T) {
	tree := baseTree(testBinary(t), []byte("ca"))
	b, err := buildSBOM(sbomInput{Repository: "example.com/x/agent-sandbox-webhook", Version: "v1.0.0", Platform: platform{"linux", "amd64"},
		ManifestDigest: "sha256:" + strings.Repeat("b", 64), Tree: tree, Versions: map[string]string{binaryPath: "v1.0.0"},
		Packages: map[string]filePackage{"/etc/ssl/certs/ca-certificates.crt": {Name: "ca-certificates", Version: "2023", PURL: "pkg:deb/debian/ca-certificates@2023"}},
		Created:  epoch, Tool: "test"})
	if err != nil {
		t.Fatal(err)
	}
	var doc spdxDocument
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.SPDXVersion != "SPDX-2.3" || doc.DataLicense != "CC0-1.0" || doc.SPDXID != "SPDXRef-DOCUMENT" || doc.CreationInfo.Created != "2025-12-01T12:00:00Z" ||
		!strings.Contains(doc.DocumentNamespace, strings.Repeat("b", 64)) {
		t.Errorf("document header: %+v", doc)
	}
	byName := map[string]spdxPackage{}
	ids := map[string]bool{}
	for _, p := range doc.Packages {
		byName[p.Name] = p
		if ids[p.SPDXID] {
			t.Errorf("duplicate SPDXID %s", p.SPDXID)
		}
		ids[p.SPDXID] = true
	}
	if p := byName["agent-sandbox-webhook"]; p.PrimaryPackagePurpose != "CONTAINER" || p.Checksums[0].ChecksumValue != strings.Repeat("b", 64) {
		t.Errorf("image package: %+v", p)
	}
	if p := byName["github.com/google/go-containerregistry"]; p.VersionInfo == "" || !strings.HasPrefix(p.ExternalRefs[0].ReferenceLocator, "pkg:golang/github.com/google/go-containerregistry@v") {
		t.Errorf("module package: %+v", p)
	}
	if p := byName["stdlib"]; p.VersionInfo == "" {
		t.Errorf("no Go standard library package: %+v", p)
	}
	if p := byName["ca-certificates"]; p.VersionInfo != "2023" || p.Checksums[0].ChecksumValue != sha256Hex([]byte("ca")) {
		t.Errorf("CA bundle package: %+v", p)
	}
	for _, r := range doc.Relationships {
		if !ids[r.SPDXElementID] && r.SPDXElementID != "SPDXRef-DOCUMENT" || !ids[r.RelatedSPDXElement] {
			t.Errorf("relationship %+v names an unknown element", r)
		}
	}
	if b2, _ := buildSBOM(sbomInput{Repository: "example.com/x/agent-sandbox-webhook", Version: "v1.0.0", Platform: platform{"linux", "amd64"},
		ManifestDigest: "sha256:" + strings.Repeat("b", 64), Tree: tree, Versions: map[string]string{binaryPath: "v1.0.0"},
		Packages: map[string]filePackage{"/etc/ssl/certs/ca-certificates.crt": {Name: "ca-certificates", Version: "2023", PURL: "pkg:deb/debian/ca-certificates@2023"}},
		Created:  epoch, Tool: "test"}); !bytes.Equal(b, b2) {
		t.Error("the SBOM is not reproducible")
	}

	bad := imagelayer.NewTree()
	bad.AddFile("/bin/sh", 0o755, []byte("\x7fELF but no Go build info"))
	if _, err := buildSBOM(sbomInput{Tree: bad, Repository: "r/x"}); err == nil {
		t.Error("an executable the SBOM cannot describe was accepted")
	}
}

func TestGoPURL(t *testing.T) {
	for _, tc := range []struct{ path, version, want string }{
		{"github.com/Foo/bar", "v1.2.3", "pkg:golang/github.com/foo/bar@v1.2.3"},
		{"github.com/hashicorp/terraform", "1.11.4", "pkg:golang/github.com/hashicorp/terraform@v1.11.4"},
		{"stdlib", "1.26.8", "pkg:golang/stdlib@1.26.8"},
		{"example.com/x", "NOASSERTION", "pkg:golang/example.com/x"},
		{"example.com/x", "v0.0.0-20260101000000-0123456789ab+incompatible", "pkg:golang/example.com/x@v0.0.0-20260101000000-0123456789ab+incompatible"},
	} {
		if got := goPURL(tc.path, tc.version); got != tc.want {
			t.Errorf("goPURL(%q, %q) = %q, want %q", tc.path, tc.version, got, tc.want)
		}
	}
}

func TestCheckArch(t *testing.T) {
	bin := testBinary(t)
	for arch := range elfMachine {
		err := checkArch("x", bin, arch)
		if (err == nil) != (arch == runtime.GOARCH) {
			t.Errorf("checkArch(test binary for %s, %s) = %v", runtime.GOARCH, arch, err)
		}
	}
	if err := checkArch("x", []byte("#!/bin/sh\n"), "amd64"); err == nil {
		t.Error("a script passed as an ELF binary")
	}
}

func TestChartVersion(t *testing.T) {
	c := strings.Repeat("0123456789", 4)
	for _, tc := range []struct{ release, own, want string }{
		{"v1.2.3", "0.1.0", "1.2.3"},
		{"v1.2.3-rc.1", "0.1.0", "1.2.3-rc.1"},
		{"0123456", "0.1.0", "0.1.0-dev.g0123456"},
		{"v1.2.3-4-g0123456-dirty", "0.1.0", "1.2.3-4-g0123456-dirty"},
		{"v1.2", "0.2.0-alpha", "0.2.0-dev.g0123456"},
	} {
		if got := chartVersion(tc.release, tc.own, c); got != tc.want || !semver.MatchString(got) {
			t.Errorf("chartVersion(%q, %q) = %q, want %q (SemVer)", tc.release, tc.own, got, tc.want)
		}
	}
}

func TestSetYAMLScalar(t *testing.T) {
	doc := `# top comment
image:
  # -- the repository
  repository: localhost/x   # trailing
  tag: ""
other:
  image:
    repository: ""

    # a comment at the block's end
    tag: ""
last: 1
`
	out, err := setYAMLScalar([]byte(doc), []string{"other", "image", "tag"}, "v1")
	if err != nil {
		t.Fatal(err)
	}
	out, err = setYAMLScalar(out, []string{"image", "repository"}, "ghcr.io/a/b")
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(strings.Replace(doc, `    tag: ""`, `    tag: "v1"`, 1), "  repository: localhost/x   # trailing", `  repository: "ghcr.io/a/b"`, 1)
	if string(out) != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
	if err := checkValues(out, []valueSet{{[]string{"other", "image", "tag"}, "v1"}, {[]string{"image", "repository"}, "ghcr.io/a/b"}}); err != nil {
		t.Error(err)
	}
	for _, p := range [][]string{{"image", "digest"}, {"nope"}, {"other", "tag"}} {
		if _, err := setYAMLScalar([]byte(doc), p, "x"); err == nil {
			t.Errorf("setting missing key %v succeeded", p)
		}
	}
}

// TestPackageChart packages a small chart twice: same bytes, helm's layout (Chart.yaml first, everything
// under the chart's name), .helmignore honoured, symlinks followed, versions and values set.
func TestPackageChart(t *testing.T) {
	dir := t.TempDir()
	write := func(rel, content string) {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("chart/Chart.yaml", "apiVersion: v2\n# the name\nname: demo\ndescription: A demo.\nversion: 0.1.0\nappVersion: dev\nsources:\n- https://example.com/src\n")
	write("chart/values.yaml", "image:\n  # -- repo\n  repository: localhost/demo\n  tag: \"\"\n")
	write("chart/.helmignore", "# comment\n/tests/\n*.bak\n")
	write("chart/templates/tests/t.yaml", "kind: Pod\n")
	write("chart/templates/a.yaml", "kind: ConfigMap\n")
	write("chart/templates/a.yaml.bak", "old\n")
	write("chart/tests/golden/x.yaml", "golden\n")
	write("policy.yaml", "the policy\n")
	if err := os.MkdirAll(filepath.Join(dir, "chart", "files"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../policy.yaml", filepath.Join(dir, "chart", "files", "policy.yaml")); err != nil {
		t.Fatal(err)
	}
	in := chartInput{Dir: filepath.Join(dir, "chart"), Version: "1.2.3", AppVersion: "v1.2.3", Created: epoch,
		Values: []valueSet{{[]string{"image", "repository"}, "ghcr.io/x/demo"}, {[]string{"image", "tag"}, "v1.2.3"}}}
	a, err := packageChart(in)
	if err != nil {
		t.Fatal(err)
	}
	b, err := packageChart(in)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.TGZ, b.TGZ) {
		t.Error("packaging twice gave different archives")
	}
	zr, err := gzip.NewReader(bytes.NewReader(a.TGZ))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	var order []string
	for _, e := range tarEntries(t, zr) {
		h := e.hdr
		got[h.Name] = string(e.data)
		order = append(order, h.Name)
		if !h.ModTime.Equal(epoch) || h.Mode != 0o644 || h.Uid != 0 {
			t.Errorf("%s: mtime %v mode %o uid %d", h.Name, h.ModTime, h.Mode, h.Uid)
		}
	}
	want := []string{"demo/Chart.yaml", "demo/.helmignore", "demo/files/policy.yaml", "demo/templates/a.yaml", "demo/templates/tests/t.yaml", "demo/values.yaml"}
	if !reflect.DeepEqual(order, want) {
		t.Errorf("archive entries = %v, want %v", order, want)
	}
	if got["demo/files/policy.yaml"] != "the policy\n" {
		t.Errorf("the symlink was not followed: %q", got["demo/files/policy.yaml"])
	}
	if !strings.Contains(got["demo/Chart.yaml"], "# the name\n") || !strings.Contains(got["demo/Chart.yaml"], "\nversion: \"1.2.3\"\n") ||
		!strings.Contains(got["demo/Chart.yaml"], "\nappVersion: \"v1.2.3\"\n") {
		t.Errorf("Chart.yaml = %s", got["demo/Chart.yaml"])
	}
	var values map[string]map[string]string
	if err := yaml.Unmarshal([]byte(got["demo/values.yaml"]), &values); err != nil || values["image"]["repository"] != "ghcr.io/x/demo" || values["image"]["tag"] != "v1.2.3" ||
		!strings.Contains(got["demo/values.yaml"], "# -- repo") {
		t.Errorf("values.yaml = %s (%v)", got["demo/values.yaml"], err)
	}
	var config map[string]any
	if err := json.Unmarshal(a.Config, &config); err != nil || config["version"] != "1.2.3" || config["name"] != "demo" {
		t.Errorf("chart config = %s", a.Config)
	}

	st := newStore()
	m, err := st.chartArtifact(a, epoch)
	if err != nil {
		t.Fatal(err)
	}
	var man ocispec.Manifest
	mb, _ := st.get(m.Digest)
	if err := json.Unmarshal(mb, &man); err != nil {
		t.Fatal(err)
	}
	if man.Config.MediaType != helmConfigMediaType || len(man.Layers) != 1 || man.Layers[0].MediaType != helmChartMediaType ||
		man.Layers[0].Digest != digest.FromBytes(a.TGZ) || man.Annotations[ocispec.AnnotationVersion] != "1.2.3" || man.Annotations[ocispec.AnnotationSource] != "https://example.com/src" {
		t.Errorf("chart manifest = %s", mb)
	}

	if _, err := packageChart(chartInput{Dir: in.Dir, Version: "v1.2.3"}); err == nil {
		t.Error("a chart version with a leading v was accepted (helm wants SemVer)")
	}
}

// TestPackageRealChart: the repository's chart has every values key the release sets.
func TestPackageRealChart(t *testing.T) {
	var sets []valueSet
	for _, d := range releaseImages {
		for _, k := range []string{"repository", "tag", "digest"} {
			sets = append(sets, valueSet{append(strings.Split(d.Value, "."), k), "x-" + k})
		}
	}
	c, err := packageChart(chartInput{Dir: filepath.Join("..", "..", "charts", "agent-sandbox"), Version: "0.1.0-dev.g0000000", AppVersion: "v0", Values: sets, Created: epoch})
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "agent-sandbox" {
		t.Errorf("chart name %q", c.Name)
	}
}

func TestCompareSums(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	os.WriteFile(a, []byte(strings.Repeat("1", 64)+"  x\n"+strings.Repeat("2", 64)+"  y\n"), 0o644)
	os.WriteFile(b, []byte(strings.Repeat("1", 64)+"  x\n"+strings.Repeat("3", 64)+"  y\n"+strings.Repeat("4", 64)+"  z\n"), 0o644)
	d, err := compareSums(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if len(d) != 2 || !strings.HasPrefix(d[0], "y: ") || d[1] != "z: only in the second build" {
		t.Errorf("diffs = %q", d)
	}
}
