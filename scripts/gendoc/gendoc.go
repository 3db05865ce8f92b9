// Package gendoc is what the documentation generators under scripts (chartdoc, rulesdoc) share: a committed
// file that is written from its source, or, with -check, held against what its source gives, so that a
// file left stale fails the unit tests and make verify.
package gendoc

import (
	"bytes"
	"fmt"
	"os"
)

// Update writes want to path (mode 0644). With check it writes nothing and instead fails when path is not
// exactly want, saying that regenerate (the command that rewrites it) must be run.
func Update(path string, want []byte, check bool, regenerate string) error {
	if check {
		got, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !bytes.Equal(got, want) {
			return fmt.Errorf("%s is out of date: run %s", path, regenerate)
		}
		return nil
	}
	return os.WriteFile(path, want, 0o644)
}
