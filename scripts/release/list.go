package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// listImages prints one line per image of the release in dir (its release.json): repository, tag, OCI archive
// (relative to dir) and image index digest, separated by spaces. scripts/release-import.sh reads it, so that
// no shell parses JSON. A value with white space in it, which would break the line apart, is refused.
func listImages(w io.Writer, dir string) error {
	data, err := os.ReadFile(filepath.Join(dir, "release.json"))
	if err != nil {
		return err
	}
	var r result
	if err := json.Unmarshal(data, &r); err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(dir, "release.json"), err)
	}
	if len(r.Images) == 0 {
		return fmt.Errorf("%s lists no images", filepath.Join(dir, "release.json"))
	}
	for i, img := range r.Images {
		fields := []string{img.Repository, img.Tag, img.Archive, img.Digest}
		for _, f := range fields {
			if f == "" || strings.ContainsFunc(f, func(r rune) bool { return r <= ' ' }) {
				return fmt.Errorf("release.json images[%d]: repository, tag, archive and digest must be non-empty and without spaces", i)
			}
		}
		if _, err := fmt.Fprintln(w, strings.Join(fields, " ")); err != nil {
			return err
		}
	}
	return nil
}
