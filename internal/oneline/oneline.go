// Package oneline folds a text onto one line, for error messages and log values that quote text from
// elsewhere (a CEL compiler, Vault, a Kubernetes status message).
//
// Trust role: none of its own; a leaf of the standard library only, imported by trusted and untrusted code
// alike. It only folds white space: it does not make text safe for a terminal (internal/screen does) nor
// remove secrets (internal/scrub does).
package oneline

import "strings"

// Fold returns s with every run of white space (newlines and tabs included) replaced by one space, and none
// at either end.
func Fold(s string) string { return strings.Join(strings.Fields(s), " ") }
