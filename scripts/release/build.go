package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"sigs.k8s.io/yaml"

	"github.com/agent-sandbox/agent-sandbox/scripts/imagelayer"
)

const (
	// binaryPath is where every image carries agent-sandbox: the policy's tool commands, the injected
	// credential agent and the chart all run /agent-sandbox.
	binaryPath = "/agent-sandbox"
	nonRootUID = 65532
	sourceURL  = "https://github.com/agent-sandbox/agent-sandbox"
	versionPkg = "github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app"
	// terraformRC makes `terraform init` take providers only from the image's filesystem mirror: nothing
	// is fetched from a registry (the same file scripts/image-agent-sandbox.sh writes for the dev image).
	terraformRC = `# Providers come only from the image's filesystem mirror: nothing is fetched from a registry.
provider_installation {
  filesystem_mirror {
    path    = "/usr/share/terraform/providers"
    include = ["registry.terraform.io/hashicorp/kubernetes"]
  }
}
disable_checkpoint = true
`
	providerMirrorPath = "/usr/share/terraform/providers"
)

// imageDef is one of the release images.
type imageDef struct {
	// Name is the repository name under the registry; Value is the chart's values key of its image.
	Name, Value, Title, Description string
	Cmd                             []string
	Runner                          bool
}

// releaseImages are the three images. The credential agent has its own image (and repository) although
// its only layer is the webhook's: it gets its own labels and default command, its own place in the
// registry's access rules and scanners, and costs no extra download. The chart runs the tools that need no
// Terraform in it too (the policy requires warm tools to run in the credential agent's image).
var releaseImages = []imageDef{
	{Name: "agent-sandbox-webhook", Value: "image", Title: "agent-sandbox webhook",
		Description: "The agent-sandbox admission webhook: policy enforcement and credential-agent injection for sandboxed AI-agent tool calls.",
		Cmd:         []string{"webhook"}},
	{Name: "agent-sandbox-credential-agent", Value: "credentialAgent.image", Title: "agent-sandbox credential agent",
		Description: "The agent-sandbox credential agent: the sidecar that fetches one scoped Kubernetes credential from Vault for a sandbox Pod and revokes it on exit; also the image of the tools that need no Terraform.",
		Cmd:         []string{"cred-agent"}},
	{Name: "agent-sandbox-runner", Value: "runner.image", Title: "agent-sandbox runner",
		Description: "The agent-sandbox Terraform runner: agent-sandbox, Terraform and the hashicorp/kubernetes provider (as a filesystem mirror) for the Terraform tools that run in a sandbox.",
		Cmd:         []string{"run"}, Runner: true},
}

// result is what a build wrote; release.json holds it.
type result struct {
	Version         string        `json:"version"`
	Commit          string        `json:"commit"`
	SourceDateEpoch int64         `json:"sourceDateEpoch"`
	GoVersion       string        `json:"goVersion"`
	Registry        string        `json:"registry"`
	Images          []imageResult `json:"images"`
	Chart           chartResult   `json:"chart"`
	out             string
}

type imageResult struct {
	Name       string `json:"name"`
	Repository string `json:"repository"`
	Tag        string `json:"tag"`
	// Digest is the image index's: the reference Kubernetes should pull, for every platform.
	Digest    string                    `json:"digest"`
	Layout    string                    `json:"layout"`
	Archive   string                    `json:"archive"`
	Platforms map[string]platformResult `json:"platforms"`
}

type platformResult struct {
	Manifest       string `json:"manifest"`
	CompressedSize int64  `json:"compressedSize"`
	SBOM           string `json:"sbom"`
	SBOMReferrer   string `json:"sbomReferrer"`
	DockerArchive  string `json:"dockerArchive,omitempty"`
}

type chartResult struct {
	Name      string `json:"name"`
	Version   string `json:"version"`
	Package   string `json:"package"`
	SHA256    string `json:"sha256"`
	Reference string `json:"reference"`
	Digest    string `json:"digest"`
	Layout    string `json:"layout"`
}

// chartVersion is the chart's version for a release version: the version itself when it is SemVer
// (v1.2.3 -> 1.2.3), else the chart's own version with a pre-release naming the commit
// (0.1.0-dev.g1a2b3c4), which sorts before the release it leads to.
func chartVersion(release, chartOwn, commit string) string {
	if v := strings.TrimPrefix(release, "v"); semver.MatchString(v) && !strings.Contains(v, "+") {
		return v
	}
	base := chartOwn
	if i := strings.IndexAny(base, "-+"); i >= 0 {
		base = base[:i]
	}
	return base + "-dev.g" + commit[:7]
}

// build writes the whole release into out. gocache, when set, is the Go build cache to use (empty: the
// user's), so that -check really compiles twice.
func (o *options) build(ctx context.Context, out, gocache string) (*result, error) {
	r := &result{Version: o.Version, Commit: o.Commit, SourceDateEpoch: o.epoch.Unix(), GoVersion: runtime.Version(), Registry: o.Registry, out: out}
	for _, sub := range []string{"oci", "images", "sbom", "charts", "release.json", "SHA256SUMS"} {
		if err := os.RemoveAll(filepath.Join(out, sub)); err != nil {
			return nil, err
		}
	}
	work, err := os.MkdirTemp("", "agent-sandbox-release-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)

	// The binaries, one per platform any image needs.
	binaries := map[platform][]byte{}
	for _, p := range union(o.platforms, o.runnerPlatforms) {
		b, err := o.goBuild(ctx, p, filepath.Join(work, "agent-sandbox-"+p.slug()), gocache)
		if err != nil {
			return nil, err
		}
		binaries[p] = b
	}
	r.GoVersion, err = o.goVersion(ctx)
	if err != nil {
		return nil, err
	}
	ca, err := os.ReadFile(o.CACerts)
	if err != nil {
		return nil, err
	}
	caPkg := filePackage{Name: "ca-certificates", Version: "NOASSERTION", Comment: "copied from the build machine's " + o.CACerts}
	if v, err := exec.CommandContext(ctx, "dpkg-query", "-W", "-f=${Version}", "ca-certificates").Output(); err == nil && len(v) > 0 {
		caPkg.Version, caPkg.PURL = string(v), "pkg:deb/debian/ca-certificates@"+string(v)
	}
	tfVersion := o.TerraformVer
	if tfVersion == "" && len(o.runnerPlatforms) > 0 {
		tfVersion = o.terraformVersion(ctx)
	}

	st := newStore()
	cache := layerCache{}
	for _, def := range releaseImages {
		ps := o.platforms
		if def.Runner {
			ps = o.runnerPlatforms
		}
		if len(ps) == 0 {
			continue
		}
		repo := o.Registry + "/" + def.Name
		ir := imageResult{Name: def.Name, Repository: repo, Tag: o.Version, Platforms: map[string]platformResult{}}
		var manifests []ocispec.Descriptor
		var sbomRoots []ocispec.Descriptor
		for _, p := range ps {
			layers := []layerSpec{{tree: baseTree(binaries[p], ca), comment: "agent-sandbox " + o.Version + ", CA certificates, the non-root user 65532"}}
			if def.Runner {
				rt, err := o.runnerTree(p)
				if err != nil {
					return nil, err
				}
				layers = append(layers, layerSpec{tree: rt, comment: "Terraform " + tfVersion + " and the hashicorp/kubernetes provider as a filesystem mirror"})
			}
			cfg := o.imageConfig(def)
			m, err := st.buildImage(cache, p, cfg, layers, o.epoch)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", def.Name, p, err)
			}
			manifests = append(manifests, m)

			// The SBOM, beside the image and attached to it as a referrer of this platform's manifest.
			all := imagelayer.NewTree()
			for _, l := range layers {
				all.Merge(l.tree)
			}
			sbom, err := buildSBOM(sbomInput{Repository: repo, Version: o.Version, Platform: p, ManifestDigest: m.Digest.String(), Tree: all,
				Versions: map[string]string{binaryPath: o.Version, "/usr/local/bin/terraform": tfVersion},
				Packages: map[string]filePackage{"/etc/ssl/certs/ca-certificates.crt": caPkg},
				Created:  o.epoch, Tool: "agent-sandbox scripts/release " + o.Version})
			if err != nil {
				return nil, fmt.Errorf("%s %s: SBOM: %w", def.Name, p, err)
			}
			sbomName := fmt.Sprintf("%s-%s-%s.spdx.json", def.Name, o.Version, p.slug())
			if err := writeFileAtomic(filepath.Join(out, "sbom", sbomName), sbom); err != nil {
				return nil, err
			}
			blob := st.put(spdxMediaType, sbom)
			blob.Annotations = map[string]string{ocispec.AnnotationTitle: sbomName}
			ref, err := st.artifactManifest(spdxArtifactType, blob, &m, map[string]string{ocispec.AnnotationCreated: o.epoch.Format(time.RFC3339)})
			if err != nil {
				return nil, err
			}
			sbomRoots = append(sbomRoots, ref)
			compressed, err := st.layersSize(m)
			if err != nil {
				return nil, err
			}
			pr := platformResult{Manifest: m.Digest.String(), CompressedSize: compressed, SBOM: "sbom/" + sbomName, SBOMReferrer: ref.Digest.String()}
			if o.DockerArchives {
				files, err := st.dockerArchiveFiles(m, repo+":"+o.Version)
				if err != nil {
					return nil, err
				}
				pr.DockerArchive = fmt.Sprintf("images/%s-%s-%s.docker.tar", def.Name, o.Version, p.slug())
				if err := writeTar(filepath.Join(out, pr.DockerArchive), nameArchiveRoot(files, repo, o.Version), o.epoch); err != nil {
					return nil, err
				}
			}
			ir.Platforms[p.String()] = pr
		}
		idx, err := st.buildIndex(manifests, o.labels(def))
		if err != nil {
			return nil, err
		}
		ir.Digest = idx.Digest.String()
		named := idx
		named.Annotations = map[string]string{ocispec.AnnotationRefName: o.Version, "io.containerd.image.name": repo + ":" + o.Version}
		ir.Layout = "oci/" + def.Name
		if err := st.writeLayout(filepath.Join(out, ir.Layout), append([]ocispec.Descriptor{named}, sbomRoots...)); err != nil {
			return nil, err
		}
		files, err := st.layoutFiles([]ocispec.Descriptor{named})
		if err != nil {
			return nil, err
		}
		ir.Archive = fmt.Sprintf("images/%s-%s.oci.tar", def.Name, o.Version)
		if err := writeTar(filepath.Join(out, ir.Archive), files, o.epoch); err != nil {
			return nil, err
		}
		r.Images = append(r.Images, ir)
		o.Log("image %s@%s (%s)", repo, ir.Digest, strings.Join(platformNames(ps), ", "))
	}

	// The chart, its values pointing at the images just built.
	chartYAML, err := os.ReadFile(filepath.Join(o.Chart, "Chart.yaml"))
	if err != nil {
		return nil, err
	}
	var own struct {
		Version string `json:"version"`
	}
	if err := yaml.Unmarshal(chartYAML, &own); err != nil {
		return nil, err
	}
	var sets []valueSet
	for _, ir := range r.Images {
		def := imageByName(ir.Name)
		key := strings.Split(def.Value, ".")
		sets = append(sets,
			valueSet{Path: append(append([]string{}, key...), "repository"), Value: ir.Repository},
			valueSet{Path: append(append([]string{}, key...), "tag"), Value: ir.Tag},
			valueSet{Path: append(append([]string{}, key...), "digest"), Value: ir.Digest})
	}
	cv := chartVersion(o.Version, own.Version, o.Commit)
	pkg, err := packageChart(chartInput{Dir: o.Chart, Version: cv, AppVersion: o.Version, Values: sets, Created: o.epoch})
	if err != nil {
		return nil, err
	}
	r.Chart = chartResult{Name: pkg.Name, Version: pkg.Version, Package: fmt.Sprintf("charts/%s-%s.tgz", pkg.Name, pkg.Version), SHA256: sha256Hex(pkg.TGZ),
		Reference: fmt.Sprintf("oci://%s/charts/%s:%s", o.Registry, pkg.Name, pkg.Version), Layout: "oci/charts/" + pkg.Name}
	if err := writeFileAtomic(filepath.Join(out, r.Chart.Package), pkg.TGZ); err != nil {
		return nil, err
	}
	cm, err := st.chartArtifact(pkg, o.epoch)
	if err != nil {
		return nil, err
	}
	r.Chart.Digest = cm.Digest.String()
	cm.Annotations = map[string]string{ocispec.AnnotationRefName: pkg.Version}
	if err := st.writeLayout(filepath.Join(out, r.Chart.Layout), []ocispec.Descriptor{cm}); err != nil {
		return nil, err
	}
	o.Log("chart %s %s (%d bytes)", pkg.Name, pkg.Version, len(pkg.TGZ))

	rj, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := writeFileAtomic(filepath.Join(out, "release.json"), append(rj, '\n')); err != nil {
		return nil, err
	}
	return r, writeSums(out)
}

// nameArchiveRoot names the single image of a docker-archive's index.json the way docker save and ctr
// export do, so that importing it into containerd gives it its repository and tag.
func nameArchiveRoot(files map[string][]byte, repo, tag string) map[string][]byte {
	var idx ocispec.Index
	if err := json.Unmarshal(files[ocispec.ImageIndexFile], &idx); err == nil && len(idx.Manifests) == 1 {
		idx.Manifests[0].Annotations = map[string]string{ocispec.AnnotationRefName: tag, "io.containerd.image.name": repo + ":" + tag}
		if b, err := json.MarshalIndent(idx, "", "  "); err == nil {
			files[ocispec.ImageIndexFile] = append(b, '\n')
		}
	}
	return files
}

func (o *options) labels(def imageDef) map[string]string {
	return map[string]string{
		ocispec.AnnotationTitle:       def.Name,
		ocispec.AnnotationDescription: def.Description,
		ocispec.AnnotationVersion:     o.Version,
		ocispec.AnnotationRevision:    o.Commit,
		ocispec.AnnotationCreated:     o.epoch.Format(time.RFC3339),
		ocispec.AnnotationSource:      sourceURL,
		ocispec.AnnotationURL:         sourceURL,
	}
}

// imageConfig is what the image runs. No shell and no package manager exist in any image; the entrypoint
// is the binary, the default command the image's role.
func (o *options) imageConfig(def imageDef) imageConfig {
	cfg := imageConfig{
		Entrypoint: []string{binaryPath},
		Cmd:        def.Cmd,
		Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp"},
		User:       fmt.Sprintf("%d:%d", nonRootUID, nonRootUID),
		WorkingDir: "/",
		Labels:     o.labels(def),
	}
	if def.Runner {
		cfg.Env = append(cfg.Env, "TF_CLI_CONFIG_FILE=/etc/terraform.rc", "CHECKPOINT_DISABLE=1", "TF_IN_AUTOMATION=1")
	}
	return cfg
}

// baseTree is the first layer of every image: the binary, the CA bundle, the users and the writable
// folders. It is what distroless/static provides, and no more.
func baseTree(binary, ca []byte) *imagelayer.Tree {
	t := imagelayer.NewTree()
	t.AddFile(binaryPath, 0o755, binary)
	t.AddFile("/etc/ssl/certs/ca-certificates.crt", 0o644, ca)
	t.AddFile("/etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"))
	t.AddFile("/etc/group", 0o644, []byte("root:x:0:\nnonroot:x:65532:\n"))
	t.AddDir("/home/nonroot", 0o700, nonRootUID, nonRootUID)
	t.AddDir("/root", 0o700, 0, 0)
	t.AddDir("/tmp", 0o1777, 0, 0)
	return t
}

// runnerTree is the runner's second layer: Terraform, its CLI configuration and this platform's builds of
// the providers in the mirror.
func (o *options) runnerTree(p platform) (*imagelayer.Tree, error) {
	t := imagelayer.NewTree()
	tf := o.terraform[p]
	if err := t.CopyFile("/usr/local/bin/terraform", tf, 0o755); err != nil {
		return nil, err
	}
	if err := checkArch(tf, t.Entry("/usr/local/bin/terraform").Data, p.Arch); err != nil {
		return nil, err
	}
	t.AddFile("/etc/terraform.rc", 0o644, []byte(terraformRC))
	// The mirror is HOSTNAME/NAMESPACE/TYPE/VERSION/OS_ARCH/...; take only this platform's folders.
	want := p.OS + "_" + p.Arch
	found := false
	err := filepath.WalkDir(o.ProviderMirror, func(f string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(o.ProviderMirror, f)
		parts := strings.Split(filepath.ToSlash(rel), "/")
		if len(parts) == 5 && d.IsDir() {
			if parts[4] != want {
				return filepath.SkipDir
			}
			found = true
			return t.CopyTree(path.Join(providerMirrorPath, filepath.ToSlash(rel)), f, imagelayer.Normalised)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("provider mirror %s: %w", o.ProviderMirror, err)
	}
	if !found {
		return nil, fmt.Errorf("provider mirror %s has no %s build of any provider", o.ProviderMirror, want)
	}
	for _, f := range t.Files() {
		if strings.HasPrefix("/"+f, providerMirrorPath) && t.Entry(f).Mode&0o111 != 0 {
			if err := checkArch(f, t.Entry(f).Data, p.Arch); err != nil {
				return nil, err
			}
		}
	}
	return t, nil
}

// goBuild compiles agent-sandbox for p and returns the binary. Everything that could make two builds of
// one commit differ is pinned: no cgo, no VCS stamp, no build ID, no file system paths, the baseline
// instruction set, the local toolchain.
func (o *options) goBuild(ctx context.Context, p platform, out, gocache string) ([]byte, error) {
	ldflags := strings.Join([]string{"-s", "-w", "-buildid=",
		"-X", versionPkg + ".version=" + o.Version,
		"-X", versionPkg + ".commit=" + o.Commit,
		"-X", versionPkg + ".commitTime=" + o.epoch.Format(time.RFC3339)}, " ")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", ldflags, "-o", out, "./cmd/agent-sandbox")
	cmd.Dir = o.Root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Arch, "GOFLAGS=-buildvcs=false",
		"GOTOOLCHAIN=local", "GOAMD64=v1", "GOARM64=v8.0", "GOEXPERIMENT=")
	if gocache != "" {
		cmd.Env = append(cmd.Env, "GOCACHE="+gocache)
	}
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go build for %s: %w\n%s", p, err, stderr.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		return nil, err
	}
	o.Log("built agent-sandbox for %s in %s (%d MB)", p, time.Since(start).Round(time.Second), len(b)>>20)
	return b, checkArch(out, b, p.Arch)
}

func (o *options) goVersion(ctx context.Context) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "env", "GOVERSION")
	cmd.Dir = o.Root
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local")
	out, err := cmd.Output()
	return strings.TrimSpace(string(out)), err
}

// terraformVersion asks a Terraform binary that runs on this machine for its version.
func (o *options) terraformVersion(ctx context.Context) string {
	tf := o.terraform[platform{OS: "linux", Arch: runtime.GOARCH}]
	if tf == "" {
		return "NOASSERTION"
	}
	cmd := exec.CommandContext(ctx, tf, "version", "-json")
	cmd.Env = append(os.Environ(), "CHECKPOINT_DISABLE=1", "TF_CLI_CONFIG_FILE=/dev/null")
	out, err := cmd.Output()
	var v struct {
		Version string `json:"terraform_version"`
	}
	if err != nil || json.Unmarshal(out, &v) != nil || v.Version == "" {
		return "NOASSERTION"
	}
	return v.Version
}

// writeSums writes SHA256SUMS: the checksum of every file under out, in `sha256sum -c` format.
func writeSums(out string) error {
	var lines []string
	err := filepath.WalkDir(out, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(out, p)
		rel = filepath.ToSlash(rel)
		if rel == "SHA256SUMS" || !isReleasePath(rel) {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		lines = append(lines, sha256Hex(b)+"  "+rel)
		return nil
	})
	if err != nil {
		return err
	}
	sort.Slice(lines, func(i, j int) bool { return lines[i][66:] < lines[j][66:] })
	return writeFileAtomic(filepath.Join(out, "SHA256SUMS"), []byte(strings.Join(lines, "\n")+"\n"))
}

// isReleasePath says whether a path under the output folder is one the release writes (the folder may
// hold other things, which are neither checksummed nor removed).
func isReleasePath(rel string) bool {
	first, _, _ := strings.Cut(rel, "/")
	switch first {
	case "oci", "images", "sbom", "charts", "release.json":
		return true
	}
	return false
}

// compareSums lists the files whose checksums differ between two SHA256SUMS files, or that only one has.
func compareSums(a, b string) ([]string, error) {
	read := func(f string) (map[string]string, error) {
		fh, err := os.Open(f)
		if err != nil {
			return nil, err
		}
		defer fh.Close()
		m := map[string]string{}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			sum, name, ok := strings.Cut(sc.Text(), "  ")
			if ok {
				m[name] = sum
			}
		}
		return m, sc.Err()
	}
	ma, err := read(a)
	if err != nil {
		return nil, err
	}
	mb, err := read(b)
	if err != nil {
		return nil, err
	}
	var diffs []string
	for name, sa := range ma {
		if sb, ok := mb[name]; !ok {
			diffs = append(diffs, name+": only in the first build")
		} else if sa != sb {
			diffs = append(diffs, fmt.Sprintf("%s: %s vs %s", name, sa[:12], sb[:12]))
		}
	}
	for name := range mb {
		if _, ok := ma[name]; !ok {
			diffs = append(diffs, name+": only in the second build")
		}
	}
	sort.Strings(diffs)
	return diffs, nil
}

// print writes a summary of the release.
func (r *result) print(w io.Writer) {
	fmt.Fprintf(w, "release %s (commit %s, %s)\n", r.Version, r.Commit[:12], r.GoVersion)
	for _, ir := range r.Images {
		fmt.Fprintf(w, "  %s:%s@%s\n", ir.Repository, ir.Tag, ir.Digest)
		for _, p := range sortedKeys(ir.Platforms) {
			pr := ir.Platforms[p]
			fmt.Fprintf(w, "    %-12s %s  %6.1f MB compressed\n", p, pr.Manifest, float64(pr.CompressedSize)/1e6)
		}
	}
	fmt.Fprintf(w, "  chart %s  %s (sha256 %s)\n", r.Chart.Reference, r.Chart.Package, r.Chart.SHA256[:12])
	fmt.Fprintf(w, "  written to %s (release.json, SHA256SUMS)\n", r.out)
}

func union(a, b []platform) []platform {
	seen := map[platform]bool{}
	var out []platform
	for _, p := range append(append([]platform{}, a...), b...) {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

func platformNames(ps []platform) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.String())
	}
	return out
}

func imageByName(name string) imageDef {
	for _, d := range releaseImages {
		if d.Name == name {
			return d
		}
	}
	return imageDef{}
}
