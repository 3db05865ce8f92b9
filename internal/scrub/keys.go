package scrub

import (
	"strings"
	"unicode"
)

// sensitiveKeyParts are the substrings that make a key's value secret. Keys are compared after
// lower-casing and turning '-', '.' and ' ' into '_', so "Client-Key", "client.key" and "client_key"
// are one key, and camelCase spellings ("privateKey", "clientKey", "apiKey") are listed on their own.
// These words are long enough not to occur inside ordinary words.
var sensitiveKeyParts = []string{
	"token", "secret", "password", "passwd", "passphrase", "authorization",
	"private_key", "privatekey", "credential", "client_key", "clientkey",
	"jwt", "kubeconfig", "cookie", "api_key", "apikey",
}

// sensitiveKeyWords are short words that make a key's value secret only as a whole word of the key:
// "db_pass", "dbPass", "PASS", "basic-auth", "MYSQL_PWD" and "sentry.dsn" are secret keys, while
// "authority", "author", "passed", "bypass" and "compass" are not. See keyWords for how a key is split.
// (PWD is also the shell's working directory; redacting a path is the price of catching MYSQL_PWD.)
var sensitiveKeyWords = map[string]bool{
	"pwd":  true,
	"pass": true,
	"auth": true,
	"dsn":  true,
}

// metadataKeys is the explicit allowlist of keys that contain a sensitive word but name metadata, not a
// secret; their values are kept (and still scrubbed as text). The comparison is on the whole normalised
// key, so "vault_token_ttl" is still redacted.
//
//   - lease_id: the Vault lease ID of a per-action credential; revocation and audit need it.
//   - token_ttl, ttl, credential_ttl: lifetimes.
//   - scope, credential_scope: the policy's credential scope name (for example "namespace-reader").
//   - token_id, approval_token_id: the jti of an approval token, public once used.
var metadataKeys = map[string]bool{
	"lease_id":          true,
	"token_ttl":         true,
	"ttl":               true,
	"scope":             true,
	"token_id":          true,
	"approval_token_id": true,
	"credential_scope":  true,
	"credential_ttl":    true,
}

// isSensitiveKey reports whether the value under key must be redacted whole.
func isSensitiveKey(key string) bool {
	k := strings.Map(func(r rune) rune {
		switch r {
		case '-', '.', ' ':
			return '_'
		}
		return r
	}, strings.ToLower(key))
	if metadataKeys[k] {
		return false
	}
	for _, p := range sensitiveKeyParts {
		if strings.Contains(k, p) {
			return true
		}
	}
	found := false
	keyWords(key, func(w string) bool {
		found = sensitiveKeyWords[w]
		return !found
	})
	return found
}

// keyWords calls yield with each word of key, lower-cased, until yield returns false. Words are
// separated by any character that is not a letter or digit, by a change from lower to upper case
// ("dbPass" is db, pass), by the last capital of a run of capitals followed by a lower-case letter
// ("HTTPAuth" is http, auth), and by a change between letters and digits ("pass2" is pass, 2).
func keyWords(key string, yield func(string) bool) {
	rs := []rune(key)
	start := -1
	emit := func(end int) bool {
		if start < 0 {
			return true
		}
		w := strings.ToLower(string(rs[start:end]))
		start = -1
		return yield(w)
	}
	for i, r := range rs {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			if !emit(i) {
				return
			}
			continue
		}
		if start >= 0 {
			prev := rs[i-1]
			boundary := unicode.IsLower(prev) && unicode.IsUpper(r) ||
				unicode.IsUpper(prev) && unicode.IsUpper(r) && i+1 < len(rs) && unicode.IsLower(rs[i+1]) ||
				unicode.IsDigit(prev) != unicode.IsDigit(r)
			if boundary && !emit(i) {
				return
			}
		}
		if start < 0 {
			start = i
		}
	}
	emit(len(rs))
}
