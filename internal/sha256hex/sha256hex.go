// Package sha256hex is the one way this module writes and recognises a SHA-256 sum: 64 lowercase hex
// digits. Plan IDs, approval parameter hashes, audit chain heads and content-addressed names all use it,
// so a sum one part writes is a sum every other part accepts. Standard library only.
package sha256hex

import (
	"crypto/sha256"
	"encoding/hex"
)

// Of is the SHA-256 of b as 64 lowercase hex digits.
func Of(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Valid reports whether s has the form Of gives: exactly 64 lowercase hex digits.
func Valid(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
