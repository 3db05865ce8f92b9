// Command release builds agent-sandbox's release artifacts without a container engine and without a
// registry, into one output folder (dist/ by default):
//
//	oci/<image>/                      OCI image layout: the multi-platform image index, and one SPDX SBOM
//	                                  per platform attached as an OCI referrer (subject = that platform's manifest)
//	images/<image>-<version>.oci.tar  the same image as an OCI archive (ctr images import, skopeo oci-archive:)
//	images/<image>-<version>-linux-<arch>.docker.tar
//	                                  one platform as a docker-archive (docker load, podman load)
//	sbom/<image>-<version>-linux-<arch>.spdx.json
//	charts/agent-sandbox-<chart version>.tgz
//	                                  the Helm chart, its values pointing at the release images by digest
//	oci/charts/agent-sandbox/         the chart as an OCI artifact layout (what helm push stores)
//	release.json, SHA256SUMS          what was built, and a checksum of every file
//
// The images: agent-sandbox-webhook (the admission webhook), agent-sandbox-credential-agent (the sidecar the
// webhook injects, and the read tools) and agent-sandbox-runner (the Terraform tools: agent-sandbox,
// Terraform and the kubernetes provider as a filesystem mirror). All three run the same static binary as the non-root user 65532, with no
// shell; the webhook and credential-agent images share their only layer, and the runner adds one.
//
// Everything is reproducible: the same commit, Go toolchain and inputs give the same bytes. Times are the
// commit's time (SOURCE_DATE_EPOCH), tar entries are sorted and owned by 0:0 (/home/nonroot by 65532),
// binaries are built with -trimpath, -buildid= and -buildvcs=false. -check builds everything twice, the
// second time with an empty Go build cache, and fails unless every file is identical.
//
// -push copies the images (with their SBOM referrers) and the chart to -registry, with the credentials of
// the local docker config (~/.docker/config.json).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "release: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	o := &options{}
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	o.bind(fs)
	list := fs.String("list-images", "", "print the images of the release in this folder (repository tag archive digest, one a line) and stop")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %s", strings.Join(fs.Args(), " "))
	}
	if *list != "" {
		return listImages(os.Stdout, *list)
	}
	if err := o.Complete(ctx); err != nil {
		return err
	}
	if err := o.Validate(); err != nil {
		return err
	}
	return o.Run(ctx)
}

// errCheckFailed says the two builds of -check differ.
var errCheckFailed = errors.New("the release is not reproducible")
