package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"sigs.k8s.io/yaml"
)

// The chart is packaged here rather than with `helm package`, which stamps every file with the current
// time and rewrites Chart.yaml without its comments. The archive has the layout helm's loader expects
// (every file under <name>/, Chart.yaml first) and follows the chart's .helmignore and symlinks
// (files/policy.yaml is a link to the repository's policy), as helm does.

// Media types of a Helm chart stored in an OCI registry (helm.sh/helm/v3/pkg/registry).
const (
	helmConfigMediaType = "application/vnd.cncf.helm.config.v1+json"
	helmChartMediaType  = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
)

// valueSet sets one scalar of values.yaml, by its key path.
type valueSet struct {
	Path  []string
	Value string
}

// chartInput is what packageChart needs.
type chartInput struct {
	Dir        string
	Version    string
	AppVersion string
	Values     []valueSet
	Created    time.Time
}

// chartPackage is a packaged chart.
type chartPackage struct {
	Name, Version string
	TGZ           []byte
	// Config is Chart.yaml as JSON: the config blob of the chart's OCI manifest, as helm push writes it.
	Config   []byte
	Metadata map[string]any
}

// semver is Helm's rule for a chart version (SemVer 2, no leading v).
var semver = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`)

// packageChart writes the chart at in.Dir as a .tgz with the given version, appVersion and values.
func packageChart(in chartInput) (*chartPackage, error) {
	if !semver.MatchString(in.Version) {
		return nil, fmt.Errorf("chart version %q is not SemVer 2", in.Version)
	}
	chartYAML, err := os.ReadFile(filepath.Join(in.Dir, "Chart.yaml"))
	if err != nil {
		return nil, err
	}
	if chartYAML, err = setTopLevel(chartYAML, "version", in.Version); err != nil {
		return nil, fmt.Errorf("Chart.yaml: %w", err)
	}
	if chartYAML, err = setTopLevel(chartYAML, "appVersion", in.AppVersion); err != nil {
		return nil, fmt.Errorf("Chart.yaml: %w", err)
	}
	var meta map[string]any
	if err := yaml.Unmarshal(chartYAML, &meta); err != nil {
		return nil, fmt.Errorf("Chart.yaml: %w", err)
	}
	name, _ := meta["name"].(string)
	if name == "" || name != path.Base(name) {
		return nil, fmt.Errorf("Chart.yaml: bad chart name %q", name)
	}
	config, err := json.Marshal(meta)
	if err != nil {
		return nil, err
	}

	values, err := os.ReadFile(filepath.Join(in.Dir, "values.yaml"))
	if err != nil {
		return nil, err
	}
	for _, v := range in.Values {
		if values, err = setYAMLScalar(values, v.Path, v.Value); err != nil {
			return nil, fmt.Errorf("values.yaml: %w", err)
		}
	}
	if err := checkValues(values, in.Values); err != nil {
		return nil, err
	}

	ignore, err := readHelmignore(filepath.Join(in.Dir, ".helmignore"))
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	err = filepath.WalkDir(in.Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(in.Dir, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		// A symlink is followed, as helm does: files/policy.yaml carries the policy's content.
		info, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		if ignore.match(rel, info.IsDir()) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if info.IsDir() {
			if !d.IsDir() {
				return fmt.Errorf("%s: a symlink to a folder is not supported", rel)
			}
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files[rel] = data
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("chart %s: %w", in.Dir, err)
	}
	files["Chart.yaml"], files["values.yaml"] = chartYAML, values

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	order := append([]string{"Chart.yaml"}, sortedKeys(files)...)
	written := map[string]bool{}
	for _, rel := range order {
		if written[rel] {
			continue
		}
		written[rel] = true
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: name + "/" + rel, Mode: 0o644, Size: int64(len(files[rel])), ModTime: in.Created, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(files[rel]); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	tgz, err := gzipBytes(buf.Bytes())
	if err != nil {
		return nil, err
	}
	return &chartPackage{Name: name, Version: in.Version, TGZ: tgz, Config: config, Metadata: meta}, nil
}

// chartArtifact writes the chart as helm push would store it: a manifest with the Chart.yaml config and
// the .tgz as its one layer, annotated like helm's.
func (s *store) chartArtifact(c *chartPackage, created time.Time) (ocispec.Descriptor, error) {
	anns := map[string]string{
		ocispec.AnnotationTitle:   c.Name,
		ocispec.AnnotationVersion: c.Version,
		ocispec.AnnotationCreated: created.UTC().Format(time.RFC3339),
	}
	if d, _ := c.Metadata["description"].(string); d != "" {
		anns[ocispec.AnnotationDescription] = d
	}
	if srcs, _ := c.Metadata["sources"].([]any); len(srcs) > 0 {
		if s, _ := srcs[0].(string); s != "" {
			anns[ocispec.AnnotationSource] = s
		}
	}
	man := ocispec.Manifest{
		Versioned:   specs.Versioned{SchemaVersion: 2},
		MediaType:   ocispec.MediaTypeImageManifest,
		Config:      s.put(helmConfigMediaType, c.Config),
		Layers:      []ocispec.Descriptor{s.put(helmChartMediaType, c.TGZ)},
		Annotations: anns,
	}
	return s.putJSON(ocispec.MediaTypeImageManifest, man)
}

// setTopLevel replaces the value of a top-level key of a YAML document, keeping everything else (comments
// included) as it is.
func setTopLevel(doc []byte, key, value string) ([]byte, error) {
	return setYAMLScalar(doc, []string{key}, value)
}

// setYAMLScalar replaces the scalar at a key path of a block-style YAML document, line by line, so that the
// document's comments survive (they are the chart's documentation). It fails unless the path names exactly
// one existing key. The value is written as a double-quoted string.
func setYAMLScalar(doc []byte, keyPath []string, value string) ([]byte, error) {
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(doc))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	start, end := 0, len(lines)
	for i, key := range keyPath {
		found, blockIndent := -1, -1
		for j := start; j < end; j++ {
			trimmed := strings.TrimLeft(lines[j], " ")
			if trimmed == "" || strings.HasPrefix(trimmed, "#") {
				continue
			}
			ind := len(lines[j]) - len(trimmed)
			if blockIndent < 0 {
				blockIndent = ind
			}
			if ind == blockIndent && strings.HasPrefix(trimmed, key+":") {
				if found >= 0 {
					return nil, fmt.Errorf("%s: the key appears twice", strings.Join(keyPath, "."))
				}
				found = j
			}
		}
		if found < 0 {
			return nil, fmt.Errorf("%s: no such key", strings.Join(keyPath[:i+1], "."))
		}
		if i == len(keyPath)-1 {
			q, _ := json.Marshal(value)
			lines[found] = strings.Repeat(" ", blockIndent) + key + ": " + string(q)
			break
		}
		// The key's block: the lines after it that are indented deeper.
		start, end = found+1, found+1
		for end < len(lines) {
			trimmed := strings.TrimLeft(lines[end], " ")
			if trimmed != "" && !strings.HasPrefix(trimmed, "#") && len(lines[end])-len(trimmed) <= blockIndent {
				break
			}
			end++
		}
	}
	return []byte(strings.Join(lines, "\n") + "\n"), nil
}

// checkValues parses the edited values and checks each set key holds its value: the line editor cannot
// have written somewhere else.
func checkValues(values []byte, sets []valueSet) error {
	var v map[string]any
	if err := yaml.Unmarshal(values, &v); err != nil {
		return fmt.Errorf("values.yaml after setting the release images: %w", err)
	}
	for _, s := range sets {
		var cur any = v
		for _, k := range s.Path {
			m, ok := cur.(map[string]any)
			if !ok {
				return fmt.Errorf("values.yaml: %s is not a map", strings.Join(s.Path, "."))
			}
			cur = m[k]
		}
		if cur != s.Value {
			return fmt.Errorf("values.yaml: %s is %v after setting it to %q", strings.Join(s.Path, "."), cur, s.Value)
		}
	}
	return nil
}

// helmignore is the subset of .helmignore that the chart uses, with helm's rules (helm.sh/helm/v3/pkg/ignore):
// comments; a pattern without a slash is matched against the base name of every file and folder; one with a
// slash against the whole path relative to the chart, a leading slash only anchoring it there; "dir/"
// matches folders only.
type helmignore struct{ patterns []string }

func readHelmignore(file string) (*helmignore, error) {
	data, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return &helmignore{}, nil
	} else if err != nil {
		return nil, err
	}
	h := &helmignore{}
	for _, l := range strings.Split(string(data), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if strings.HasPrefix(l, "!") {
			return nil, fmt.Errorf(".helmignore: negated pattern %q is not supported by the release packager", l)
		}
		if _, err := path.Match(strings.TrimSuffix(l, "/"), ""); err != nil {
			return nil, fmt.Errorf(".helmignore: pattern %q: %w", l, err)
		}
		h.patterns = append(h.patterns, l)
	}
	return h, nil
}

// match says whether rel (slash-separated, relative to the chart) is ignored.
func (h *helmignore) match(rel string, isDir bool) bool {
	base := path.Base(rel)
	for _, p := range h.patterns {
		dirOnly := strings.HasSuffix(p, "/")
		p = strings.TrimSuffix(p, "/")
		if dirOnly && !isDir {
			continue
		}
		target := base
		if strings.Contains(p, "/") {
			p, target = strings.TrimPrefix(p, "/"), rel
		}
		if ok, _ := path.Match(p, target); ok {
			return true
		}
	}
	return false
}
