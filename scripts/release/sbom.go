package main

import (
	"bytes"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/agent-sandbox/agent-sandbox/scripts/imagelayer"
)

// The SBOM of an image is an SPDX 2.3 JSON document (https://spdx.github.io/spdx-spec/v2.3/) listing what
// the image holds: each Go binary, with the Go standard library and every module it was linked from (read
// from the binary's own build info, so the list is exactly what was compiled in, not what go.mod allows),
// and the files that are not Go binaries (the CA bundle, by its Debian package when known).

const (
	spdxMediaType    = "application/spdx+json"
	spdxArtifactType = "application/spdx+json"
)

type spdxDocument struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreationInfo   `json:"creationInfo"`
	DocumentDescribes []string           `json:"documentDescribes"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
}

type spdxCreationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	SPDXID                string            `json:"SPDXID"`
	Name                  string            `json:"name"`
	VersionInfo           string            `json:"versionInfo,omitempty"`
	Supplier              string            `json:"supplier,omitempty"`
	DownloadLocation      string            `json:"downloadLocation"`
	FilesAnalyzed         bool              `json:"filesAnalyzed"`
	Checksums             []spdxChecksum    `json:"checksums,omitempty"`
	LicenseConcluded      string            `json:"licenseConcluded"`
	LicenseDeclared       string            `json:"licenseDeclared"`
	CopyrightText         string            `json:"copyrightText"`
	PrimaryPackagePurpose string            `json:"primaryPackagePurpose,omitempty"`
	Comment               string            `json:"comment,omitempty"`
	ExternalRefs          []spdxExternalRef `json:"externalRefs,omitempty"`
}

type spdxChecksum struct {
	Algorithm     string `json:"algorithm"`
	ChecksumValue string `json:"checksumValue"`
}

type spdxExternalRef struct {
	ReferenceCategory string `json:"referenceCategory"`
	ReferenceType     string `json:"referenceType"`
	ReferenceLocator  string `json:"referenceLocator"`
}

type spdxRelationship struct {
	SPDXElementID      string `json:"spdxElementId"`
	RelationshipType   string `json:"relationshipType"`
	RelatedSPDXElement string `json:"relatedSpdxElement"`
}

// sbomInput describes one single-platform image for its SBOM.
type sbomInput struct {
	// Repository is the image's repository (registry/name) and Version the release version.
	Repository, Version string
	Platform            platform
	// ManifestDigest is the digest of the image's manifest: the SBOM describes exactly that image.
	ManifestDigest string
	// Tree is the image's file system.
	Tree *imagelayer.Tree
	// Versions names the version of a binary whose build info has none ("(devel)"), by image path:
	// agent-sandbox's own release version, Terraform's from `terraform version`.
	Versions map[string]string
	// Packages describes files that are not Go binaries, by image path (the CA bundle).
	Packages map[string]filePackage
	Created  time.Time
	Tool     string
}

// filePackage is a file of the image that came from a system package of the build machine.
type filePackage struct {
	Name, Version, PURL, Comment string
}

var spdxIDUnsafe = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

func spdxID(kind, name string) string {
	return "SPDXRef-" + kind + "-" + strings.Trim(spdxIDUnsafe.ReplaceAllString(name, "-"), "-")
}

// goPURL is the package URL of a Go module (https://github.com/package-url/purl-spec, type golang).
func goPURL(path, version string) string {
	p := "pkg:golang/" + strings.ToLower(path)
	if version == "" || version == "(devel)" || version == "NOASSERTION" {
		return p
	}
	// A version from outside the build info (`terraform version` says 1.11.4) in the module form, v1.11.4.
	if path != "stdlib" && version[0] >= '0' && version[0] <= '9' {
		version = "v" + version
	}
	return p + "@" + url.PathEscape(version)
}

// buildSBOM returns the SPDX document of one image.
func buildSBOM(in sbomInput) ([]byte, error) {
	name := in.Repository[strings.LastIndex(in.Repository, "/")+1:]
	imageID := "SPDXRef-Image"
	doc := spdxDocument{
		SPDXVersion: "SPDX-2.3",
		DataLicense: "CC0-1.0",
		SPDXID:      "SPDXRef-DOCUMENT",
		Name:        fmt.Sprintf("%s %s %s", name, in.Version, in.Platform),
		// Unique per image: the manifest digest names exactly one image.
		DocumentNamespace: fmt.Sprintf("https://github.com/agent-sandbox/agent-sandbox/spdx/%s/%s/%s", name, in.Version, in.ManifestDigest),
		CreationInfo:      spdxCreationInfo{Created: in.Created.UTC().Format(time.RFC3339), Creators: []string{"Tool: " + in.Tool, "Organization: agent-sandbox"}},
		DocumentDescribes: []string{imageID},
	}
	hexDigest := strings.TrimPrefix(in.ManifestDigest, "sha256:")
	doc.Packages = append(doc.Packages, spdxPackage{
		SPDXID: imageID, Name: name, VersionInfo: in.Version,
		DownloadLocation: "NOASSERTION", LicenseConcluded: "NOASSERTION", LicenseDeclared: "NOASSERTION", CopyrightText: "NOASSERTION",
		PrimaryPackagePurpose: "CONTAINER",
		Checksums:             []spdxChecksum{{Algorithm: "SHA256", ChecksumValue: hexDigest}},
		ExternalRefs: []spdxExternalRef{{ReferenceCategory: "PACKAGE-MANAGER", ReferenceType: "purl",
			ReferenceLocator: fmt.Sprintf("pkg:oci/%s@%s?arch=%s&repository_url=%s", name, url.QueryEscape(in.ManifestDigest), in.Platform.Arch, url.QueryEscape(in.Repository))}},
	})
	modules := map[string]spdxPackage{}
	var rels []spdxRelationship
	addModule := func(from, path, version, comment string) {
		id := spdxID("Module", path+"-"+version)
		if _, ok := modules[id]; !ok {
			p := spdxPackage{SPDXID: id, Name: path, VersionInfo: version,
				DownloadLocation: "NOASSERTION", LicenseConcluded: "NOASSERTION", LicenseDeclared: "NOASSERTION", CopyrightText: "NOASSERTION",
				PrimaryPackagePurpose: "LIBRARY",
				ExternalRefs:          []spdxExternalRef{{ReferenceCategory: "PACKAGE-MANAGER", ReferenceType: "purl", ReferenceLocator: goPURL(path, version)}}}
			p.Comment = comment
			modules[id] = p
		}
		rels = append(rels, spdxRelationship{from, "DEPENDS_ON", id})
	}
	for _, file := range in.Tree.Files() {
		e := in.Tree.Entry(file)
		if fp, ok := in.Packages["/"+file]; ok {
			id := spdxID("File", file)
			p := spdxPackage{SPDXID: id, Name: fp.Name, VersionInfo: fp.Version,
				DownloadLocation: "NOASSERTION", LicenseConcluded: "NOASSERTION", LicenseDeclared: "NOASSERTION", CopyrightText: "NOASSERTION",
				PrimaryPackagePurpose: "FILE", Comment: fp.Comment,
				Checksums: []spdxChecksum{{Algorithm: "SHA256", ChecksumValue: sha256Hex(e.Data)}}}
			if fp.PURL != "" {
				p.ExternalRefs = []spdxExternalRef{{ReferenceCategory: "PACKAGE-MANAGER", ReferenceType: "purl", ReferenceLocator: fp.PURL}}
			}
			doc.Packages = append(doc.Packages, p)
			rels = append(rels, spdxRelationship{imageID, "CONTAINS", id})
			continue
		}
		if e.Mode&0o111 == 0 || !bytes.HasPrefix(e.Data, []byte("\x7fELF")) {
			continue
		}
		bi, err := buildinfo.Read(bytes.NewReader(e.Data))
		if err != nil {
			return nil, fmt.Errorf("/%s: an executable without Go build info: the SBOM cannot describe it: %w", file, err)
		}
		version := bi.Main.Version
		if v := in.Versions["/"+file]; v != "" && (version == "" || version == "(devel)") {
			version = v
		}
		if version == "" || version == "(devel)" {
			version = "NOASSERTION"
		}
		id := spdxID("Binary", file)
		settings := []string{}
		for _, s := range bi.Settings {
			if s.Key == "GOOS" || s.Key == "GOARCH" || s.Key == "CGO_ENABLED" || s.Key == "-trimpath" {
				settings = append(settings, s.Key+"="+s.Value)
			}
		}
		doc.Packages = append(doc.Packages, spdxPackage{
			SPDXID: id, Name: bi.Main.Path, VersionInfo: version,
			DownloadLocation: "NOASSERTION", LicenseConcluded: "NOASSERTION", LicenseDeclared: "NOASSERTION", CopyrightText: "NOASSERTION",
			PrimaryPackagePurpose: "APPLICATION",
			Comment:               fmt.Sprintf("/%s, package %s, built with %s (%s)", file, bi.Path, bi.GoVersion, strings.Join(settings, " ")),
			Checksums:             []spdxChecksum{{Algorithm: "SHA256", ChecksumValue: sha256Hex(e.Data)}},
			ExternalRefs:          []spdxExternalRef{{ReferenceCategory: "PACKAGE-MANAGER", ReferenceType: "purl", ReferenceLocator: goPURL(bi.Main.Path, version)}},
		})
		rels = append(rels, spdxRelationship{imageID, "CONTAINS", id})
		addModule(id, "stdlib", strings.TrimPrefix(bi.GoVersion, "go"), "")
		for _, d := range bi.Deps {
			if d.Replace != nil {
				if d.Replace.Version == "" {
					// A replacement by a local folder: nothing the SBOM could point at.
					addModule(id, d.Path, "NOASSERTION", "replaced by "+d.Replace.Path)
					continue
				}
				d = d.Replace
			}
			comment := ""
			if d.Sum != "" {
				comment = "go.sum " + d.Sum
			}
			addModule(id, d.Path, d.Version, comment)
		}
	}
	for _, id := range sortedKeys(modules) {
		doc.Packages = append(doc.Packages, modules[id])
	}
	sort.SliceStable(rels, func(i, j int) bool {
		a, b := rels[i], rels[j]
		if a.SPDXElementID != b.SPDXElementID {
			return a.SPDXElementID < b.SPDXElementID
		}
		return a.RelatedSPDXElement < b.RelatedSPDXElement
	})
	doc.Relationships = append([]spdxRelationship{{"SPDXRef-DOCUMENT", "DESCRIBES", imageID}}, dedupe(rels)...)
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

func dedupe(rels []spdxRelationship) []spdxRelationship {
	var out []spdxRelationship
	for i, r := range rels {
		if i > 0 && r == rels[i-1] {
			continue
		}
		out = append(out, r)
	}
	return out
}
