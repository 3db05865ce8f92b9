package main

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// push copies every OCI layout of the release to the registry: each image index under its tag, each SBOM
// referrer by digest (a registry with the OCI 1.1 referrers API indexes it by its subject; for one without,
// go-containerregistry maintains the sha256-<digest> fallback tag), and the chart under its version, where
// `helm pull oci://REGISTRY/charts/agent-sandbox --version VERSION` finds it. Credentials come from the
// docker config (~/.docker/config.json, or $DOCKER_CONFIG), as `docker login` or `crane auth login` write it.
//
// Nothing here can run on the build machine, which reaches no registry: this code is compiled and its
// layouts are read back by the tests, but no push has been made from it yet.
func (o *options) push(ctx context.Context, r *result) error {
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}
	targets := map[string]string{}
	for _, ir := range r.Images {
		targets[ir.Layout] = ir.Repository
	}
	targets[r.Chart.Layout] = o.Registry + "/charts/" + r.Chart.Name
	for _, dir := range sortedKeys(targets) {
		if err := pushLayout(filepath.Join(r.out, dir), targets[dir], opts, o.Log); err != nil {
			return fmt.Errorf("push %s: %w", dir, err)
		}
	}
	return nil
}

// pushLayout pushes every root of the layout at dir to repo: tagged by its ref.name annotation when it has
// one, by digest otherwise.
func pushLayout(dir, repo string, opts []remote.Option, log func(string, ...any)) error {
	p, err := layout.FromPath(dir)
	if err != nil {
		return err
	}
	ii, err := p.ImageIndex()
	if err != nil {
		return err
	}
	im, err := ii.IndexManifest()
	if err != nil {
		return err
	}
	// Images before their referrers: a referrer's subject should exist when it arrives.
	for _, pass := range []bool{false, true} {
		for _, d := range im.Manifests {
			if isReferrer := d.ArtifactType == spdxArtifactType; isReferrer != pass {
				continue
			}
			var ref name.Reference
			if tag := d.Annotations[ocispec.AnnotationRefName]; tag != "" {
				ref, err = name.NewTag(repo + ":" + tag)
			} else {
				ref, err = name.NewDigest(repo + "@" + d.Digest.String())
			}
			if err != nil {
				return err
			}
			switch d.MediaType {
			case types.OCIImageIndex, types.DockerManifestList:
				idx, err := ii.ImageIndex(d.Digest)
				if err != nil {
					return err
				}
				err = remote.WriteIndex(ref, idx, opts...)
				if err != nil {
					return fmt.Errorf("%s: %w", ref, err)
				}
			default:
				img, err := ii.Image(d.Digest)
				if err != nil {
					return err
				}
				if err := remote.Write(ref, img, opts...); err != nil {
					return fmt.Errorf("%s: %w", ref, err)
				}
			}
			log("pushed %s (%s)", ref, d.Digest)
		}
	}
	return nil
}
