package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// options are the flags of the release tool.
type options struct {
	Root            string
	Out             string
	Registry        string
	Version         string
	Commit          string
	SourceDateEpoch string
	Platforms       string
	RunnerPlatforms string
	Terraform       multiFlag
	TerraformVer    string
	ProviderMirror  string
	CACerts         string
	Chart           string
	DockerArchives  bool
	Check           bool
	Push            bool
	Log             func(format string, args ...any)

	epoch           time.Time
	platforms       []platform
	runnerPlatforms []platform
	terraform       map[platform]string
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// DefaultRegistry is a placeholder: nothing is pushed there unless -push is given, and the chart's image
// references name it until a release is built for a real registry.
const DefaultRegistry = "ghcr.io/agent-sandbox"

func (o *options) bind(fs *flag.FlagSet) {
	fs.StringVar(&o.Root, "root", "", "repository root (default: the git top level of the working directory)")
	fs.StringVar(&o.Out, "out", "dist", "output folder, relative to -root; its release artifacts are replaced")
	fs.StringVar(&o.Registry, "registry", envOr("REGISTRY", DefaultRegistry), "registry and namespace of the images and the chart [$REGISTRY]")
	fs.StringVar(&o.Version, "version", os.Getenv("VERSION"), "release version: the image tag and the binaries' version (default: git describe --tags --always --dirty) [$VERSION]")
	fs.StringVar(&o.Commit, "commit", "", "commit stamped into the binaries and labels (default: git rev-parse HEAD)")
	fs.StringVar(&o.SourceDateEpoch, "source-date-epoch", os.Getenv("SOURCE_DATE_EPOCH"), "Unix time of every timestamp in the artifacts (default: the commit's time) [$SOURCE_DATE_EPOCH]")
	fs.StringVar(&o.Platforms, "platforms", "linux/amd64,linux/arm64", "platforms of the webhook and credential-agent images")
	fs.StringVar(&o.RunnerPlatforms, "runner-platforms", "linux/amd64", "platforms of the runner image; each needs a Terraform binary (-terraform) and the provider in the mirror")
	fs.Var(&o.Terraform, "terraform", "PLATFORM=PATH of a Terraform binary for the runner image, repeatable (default: linux/<this machine's arch>=`command -v terraform`)")
	fs.StringVar(&o.TerraformVer, "terraform-version", "", "Terraform's version for the SBOM (default: asked from the binary when it runs here)")
	fs.StringVar(&o.ProviderMirror, "provider-mirror", "", "Terraform filesystem mirror holding registry.terraform.io/hashicorp/kubernetes (scripts/lib.sh dir_tfprovider)")
	fs.StringVar(&o.CACerts, "ca-certificates", "/etc/ssl/certs/ca-certificates.crt", "CA bundle installed as /etc/ssl/certs/ca-certificates.crt in every image")
	fs.StringVar(&o.Chart, "chart", "charts/agent-sandbox", "the Helm chart, relative to -root")
	fs.BoolVar(&o.DockerArchives, "docker-archives", true, "also write one docker-archive tarball per image and platform")
	fs.BoolVar(&o.Check, "check", false, "build twice (the second time with an empty Go build cache) and fail unless both builds are identical")
	fs.BoolVar(&o.Push, "push", false, "push the images, their SBOMs and the chart to -registry after building")
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// Complete fills what was not given from git and the machine.
func (o *options) Complete(ctx context.Context) error {
	if o.Log == nil {
		o.Log = func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
		}
	}
	git := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = o.Root
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out)), nil
	}
	var err error
	if o.Root == "" {
		if o.Root, err = git("rev-parse", "--show-toplevel"); err != nil {
			return err
		}
	}
	if o.Commit == "" {
		if o.Commit, err = git("rev-parse", "HEAD"); err != nil {
			return err
		}
	}
	if o.Version == "" {
		if o.Version, err = git("describe", "--tags", "--always", "--dirty"); err != nil {
			return err
		}
	}
	if o.SourceDateEpoch == "" {
		if o.SourceDateEpoch, err = git("log", "-1", "--format=%ct", o.Commit); err != nil {
			return err
		}
	}
	if !filepath.IsAbs(o.Out) {
		o.Out = filepath.Join(o.Root, o.Out)
	}
	if !filepath.IsAbs(o.Chart) {
		o.Chart = filepath.Join(o.Root, o.Chart)
	}
	if len(o.Terraform) == 0 {
		if tf, err := exec.LookPath("terraform"); err == nil {
			o.Terraform = multiFlag{"linux/" + runtime.GOARCH + "=" + tf}
		}
	}
	return nil
}

// tagPattern is the grammar of an image tag.
var tagPattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// registryPattern is a registry host with an optional port and path, without a scheme or tag.
var registryPattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*$`)

// Validate reports every problem at once.
func (o *options) Validate() error {
	var errs []error
	if !registryPattern.MatchString(o.Registry) {
		errs = append(errs, fmt.Errorf("-registry %q: want HOST[:PORT][/PATH], lower case, no scheme and no tag", o.Registry))
	}
	if !tagPattern.MatchString(o.Version) {
		errs = append(errs, fmt.Errorf("-version %q is not a valid image tag", o.Version))
	}
	if !regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(o.Commit) {
		errs = append(errs, fmt.Errorf("-commit %q: want a full 40-character SHA-1", o.Commit))
	}
	if sec, err := strconv.ParseInt(o.SourceDateEpoch, 10, 64); err != nil || sec < 0 {
		errs = append(errs, fmt.Errorf("-source-date-epoch %q: want Unix seconds", o.SourceDateEpoch))
	} else {
		o.epoch = time.Unix(sec, 0).UTC()
	}
	parse := func(flagName, list string) []platform {
		var ps []platform
		seen := map[platform]bool{}
		for _, s := range strings.Split(list, ",") {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			p, err := parsePlatform(s)
			if err != nil {
				errs = append(errs, fmt.Errorf("-%s: %w", flagName, err))
				continue
			}
			if !seen[p] {
				seen[p] = true
				ps = append(ps, p)
			}
		}
		return ps
	}
	o.platforms, o.runnerPlatforms = parse("platforms", o.Platforms), parse("runner-platforms", o.RunnerPlatforms)
	if len(o.platforms) == 0 {
		errs = append(errs, errors.New("-platforms: at least one platform"))
	}
	o.terraform = map[platform]string{}
	for _, t := range o.Terraform {
		ps, path, ok := strings.Cut(t, "=")
		p, err := parsePlatform(ps)
		if !ok || err != nil {
			errs = append(errs, fmt.Errorf("-terraform %q: want linux/ARCH=PATH", t))
			continue
		}
		o.terraform[p] = path
	}
	if len(o.runnerPlatforms) > 0 {
		for _, p := range o.runnerPlatforms {
			if o.terraform[p] == "" {
				errs = append(errs, fmt.Errorf("the runner image for %s needs a Terraform binary for %s (-terraform %s=PATH): "+
					"this machine's terraform is a prebuilt binary, and Terraform cannot be built from the Go module proxy (its go.mod replaces modules by local folders)", p, p, p))
			}
		}
		if o.ProviderMirror == "" {
			errs = append(errs, errors.New("-provider-mirror is required for the runner image (scripts/build-tools.sh terraform-provider-kubernetes, then scripts/lib.sh dir_tfprovider)"))
		}
	}
	if _, err := os.Stat(filepath.Join(o.Chart, "Chart.yaml")); err != nil {
		errs = append(errs, fmt.Errorf("-chart: %w", err))
	}
	if _, err := os.Stat(o.CACerts); err != nil {
		errs = append(errs, fmt.Errorf("-ca-certificates: %w", err))
	}
	if o.Check && o.Push {
		errs = append(errs, errors.New("-check and -push: check first, then push from a separate run"))
	}
	return errors.Join(errs...)
}

// Run builds the release (twice with -check) and pushes it with -push.
func (o *options) Run(ctx context.Context) error {
	start := time.Now()
	r, err := o.build(ctx, o.Out, "")
	if err != nil {
		return err
	}
	o.Log("wrote %s in %s", o.Out, time.Since(start).Round(time.Second))
	r.print(os.Stdout)
	if o.Check {
		tmp, err := os.MkdirTemp("", "agent-sandbox-release-check-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		o.Log("-check: building again into %s with an empty Go build cache", tmp)
		if _, err := o.build(ctx, filepath.Join(tmp, "dist"), filepath.Join(tmp, "gocache")); err != nil {
			return fmt.Errorf("second build: %w", err)
		}
		diffs, err := compareSums(filepath.Join(o.Out, "SHA256SUMS"), filepath.Join(tmp, "dist", "SHA256SUMS"))
		if err != nil {
			return err
		}
		if len(diffs) > 0 {
			return fmt.Errorf("%w: %d files differ between two builds:\n  %s", errCheckFailed, len(diffs), strings.Join(diffs, "\n  "))
		}
		o.Log("-check: both builds are identical (every file of SHA256SUMS, in %s)", time.Since(start).Round(time.Second))
	}
	if o.Push {
		return o.push(ctx, r)
	}
	return nil
}
