// Package scrub removes secrets from text and values before they leave a process: audit records, log
// lines, error messages, MCP responses and the output of the tools that run in a sandbox.
//
// Two mechanisms work together.
//
//   - Patterns recognise secrets by their shape, whoever issued them: JWTs, PEM blocks, Vault tokens (hvs.,
//     hvb., hvr. and the legacy s., b., r. forms), AWS access key IDs, HTTP bearer credentials, passwords
//     in URLs, and the values of key=value, key: value and "key": "value" pairs (also inside escaped JSON)
//     whose key names a secret. The package-level String and Value apply the patterns only.
//   - Exact values: a Scrubber made by New also removes every occurrence of the values it was given (the
//     credential a sandbox was issued, which the sandbox knows), together with their JSON-escaped, base64
//     and URL-encoded forms. Patterns cannot catch a token that has no recognisable shape; invariant 6 asks
//     for scrubbing "by the exact bytes issued, not only by pattern".
//
// # Replacements
//
// A secret is replaced by a marker such as "<redacted>", "<redacted:jwt>" or "<redacted:secret>". The
// markers contain '<' and '>', which no pattern and no exact value (New refuses values containing them)
// can match across, so scrubbing is idempotent (scrubbing scrubbed text changes nothing) and a
// replacement never forms a new match with its neighbours. FuzzScrub checks both.
//
// Everything here is safe for concurrent use; a Scrubber is immutable once made.
package scrub

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Replacement texts. None of them contains text that a pattern or an exact value can match.
const (
	redacted       = "<redacted>"
	redactedJWT    = "<redacted:jwt>"
	redactedPEM    = "<redacted:pem>"
	redactedVault  = "<redacted:vault-token>"
	redactedAWS    = "<redacted:aws-key-id>"
	redactedSecret = "<redacted:secret>"
)

// MinSecretLen is the shortest value New accepts: a shorter one would blank out ordinary text wherever
// it happens to occur.
const MinSecretLen = 8

// Errors returned by New.
var (
	// ErrShortSecret means a value is shorter than MinSecretLen bytes.
	ErrShortSecret = errors.New("secret is too short to scrub by value")
	// ErrUnscrubbableSecret means a value contains a character that makes exact scrubbing unreliable: a
	// line break (the Writer scrubs line by line, so it could never see the value whole) or '<' or '>'
	// (the replacement markers contain them, so a replacement could rebuild the value with its
	// neighbours).
	ErrUnscrubbableSecret = errors.New("secret cannot be scrubbed by value")
)

// Scrubber removes secrets by pattern and, if it was made by New with values, by exact value. The nil
// *Scrubber is valid and applies the patterns only.
type Scrubber struct {
	// forms are the secret values and their encodings, deduplicated, longest first, so that a longer
	// encoding is replaced whole before a shorter one could match part of it.
	forms []string
}

// New returns a Scrubber that, besides the patterns, removes every occurrence of each secret and of
// its encodings: JSON-escaped (once and twice, with and without HTML escaping), base64 (standard and
// URL alphabets, at any alignment, so also inside a larger base64 blob such as a Kubernetes Secret's
// data) and URL-encoded (query and path escaping, upper- and lower-case hex). A secret shorter than
// MinSecretLen bytes is refused with ErrShortSecret; one containing a line break, '<' or '>' with
// ErrUnscrubbableSecret. New with no secrets is the same as the package-level functions.
func New(secrets ...[]byte) (*Scrubber, error) {
	s := &Scrubber{}
	for i, v := range secrets {
		if len(v) < MinSecretLen {
			return nil, fmt.Errorf("value %d is %d bytes long, not at least %d (%w)", i, len(v), MinSecretLen, ErrShortSecret)
		}
		if j := strings.IndexAny(string(v), "\n\r<>"); j >= 0 {
			return nil, fmt.Errorf("value %d has %q at byte %d (%w)", i, v[j], j, ErrUnscrubbableSecret)
		}
		s.forms = append(s.forms, encodings(string(v))...)
	}
	slices.SortFunc(s.forms, func(a, b string) int { return len(b) - len(a) })
	s.forms = slices.Compact(s.forms)
	return s, nil
}

// patternsOnly is the Scrubber of the package-level functions. It holds no state.
var patternsOnly *Scrubber

// String returns s with secrets replaced, by pattern only. Callers that know the secret values use a
// Scrubber from New instead.
func String(s string) string { return patternsOnly.String(s) }

// Value returns a scrubbed copy of v, by pattern only; see (*Scrubber).Value.
func Value(v any) any { return patternsOnly.Value(v) }

// String returns s with secrets replaced: exact values first, then the patterns.
func (s *Scrubber) String(in string) string {
	out, _ := s.scrub(in)
	return out
}

// Bytes is String for a byte slice. It returns a new slice and leaves b alone.
func (s *Scrubber) Bytes(b []byte) []byte {
	return []byte(s.String(string(b)))
}

// patterns compiled once; they are never modified.
var (
	// A PEM block, or, if it was cut short, everything from its BEGIN line on. Group 1 is set when
	// the block is complete; the streaming Writer needs to know.
	pemRE = regexp.MustCompile(`(?s)-----BEGIN [^\n]*?-----(?:(.*?-----END [^\n]*?-----)|.*)`)
	// pemEndRE finds the end of a PEM block that began on an earlier line.
	pemEndRE = regexp.MustCompile(`-----END [^\n]*?-----`)
	// The password of a URL's userinfo, scheme://user:password@host. The password runs to the last '@'
	// before the path, so an unescaped '@' inside it is covered.
	urlPassRE = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)([^\s:/?#@"'<>]*):([^\s/?#"']*)@`)
	// Vault service, batch and recovery tokens.
	vaultRE = regexp.MustCompile(`hv[sbr]\.[A-Za-z0-9_-]{20,}`)
	// Legacy (pre-1.10) Vault tokens: service and recovery tokens are s. or r. and 24 base62 characters;
	// batch tokens are b. and longer.
	vaultLegacyRE = regexp.MustCompile(`\b[sr]\.[A-Za-z0-9]{24}\b|\bb\.[A-Za-z0-9]{24,}\b`)
	// AWS access key IDs, long-term (AKIA) and temporary (ASIA).
	awsKeyRE = regexp.MustCompile(`\b(?:AKIA|ASIA)[A-Z0-9]{16}\b`)
	// An HTTP bearer credential. The word and the space after it are kept as they were, so that the
	// replacement adds no text that could combine with its neighbours.
	bearerRE = regexp.MustCompile(`(?i)\b(bearer\s+)[A-Za-z0-9._~+/-]+=*`)
	// A JWT (JWS compact form): base64url header starting with {" then payload and signature.
	jwtRE = regexp.MustCompile(`eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*`)
)

// scrub replaces secrets in one text and reports whether the text ends inside a PEM block that its
// END line does not close (the streaming Writer then drops the lines that follow, up to the END line).
//
// Every replacement keeps only text of the input and a marker, so no new secret can appear. The order
// matters for idempotency: exact values first (they may have any shape), then patterns that need a word
// boundary before later ones that could otherwise make one, and JWTs last, so that no earlier
// replacement can leave a JWT-shaped string behind.
func (s *Scrubber) scrub(in string) (out string, openPEM bool) {
	out = in
	if s != nil {
		for _, f := range s.forms {
			if strings.Contains(out, f) {
				out = strings.ReplaceAll(out, f, redactedSecret)
			}
		}
	}
	if strings.Contains(out, "-----BEGIN ") {
		out, openPEM = replacePEM(out)
	}
	if strings.Contains(out, "://") && strings.Contains(out, "@") {
		out = urlPassRE.ReplaceAllString(out, "${1}${2}:"+redacted+"@")
	}
	if strings.Contains(out, "hv") {
		out = vaultRE.ReplaceAllLiteralString(out, redactedVault)
	}
	if strings.Contains(out, "s.") || strings.Contains(out, "b.") || strings.Contains(out, "r.") {
		out = vaultLegacyRE.ReplaceAllLiteralString(out, redactedVault)
	}
	if strings.Contains(out, "AKIA") || strings.Contains(out, "ASIA") {
		out = awsKeyRE.ReplaceAllLiteralString(out, redactedAWS)
	}
	if containsFold(out, "bearer") {
		out = bearerRE.ReplaceAllString(out, "${1}"+redacted)
	}
	if strings.ContainsAny(out, ":=") {
		out = replaceKV(out)
	}
	if strings.Contains(out, "eyJ") {
		out = jwtRE.ReplaceAllLiteralString(out, redactedJWT)
	}
	return out, openPEM
}

// replacePEM replaces PEM blocks and reports whether the last one is cut short.
func replacePEM(in string) (string, bool) {
	locs := pemRE.FindAllStringSubmatchIndex(in, -1)
	if locs == nil {
		return in, false
	}
	var b strings.Builder
	b.Grow(len(in))
	last := 0
	for _, loc := range locs {
		b.WriteString(in[last:loc[0]])
		b.WriteString(redactedPEM)
		last = loc[1]
	}
	b.WriteString(in[last:])
	return b.String(), locs[len(locs)-1][2] < 0
}

// kvTriggers are words of which every sensitive key (see isSensitiveKey) contains at least one, in
// lower case: "pass" stands for password, passwd and passphrase, "auth" for authorization, "key" for
// private_key, client_key and api_key and their spellings.
var kvTriggers = []string{"token", "secret", "pass", "auth", "key", "credential", "jwt", "kubeconfig", "cookie", "pwd", "dsn"}

// replaceKV redacts the value of every key/value pair whose key is sensitive, keeping the key, the
// separator and the value's quotes. It finds key=value, key: value, "key": value and \"key\":\"value\"
// (escaped JSON, any depth): a key is a maximal run of letters, digits, '_', '.' and '-' that contains
// a trigger word and is followed by an optional (escaped) closing quote, blanks, and ':' or '='. The
// value is parsed by kvValueEnd, since its end depends on its quoting. This is a hand-written scanner
// rather than a regular expression because it runs on every string and regexp took ~0.5 µs a byte.
func replaceKV(in string) string {
	var b strings.Builder
	last, pos := 0, 0
	for pos < len(in) {
		at, word := nextTrigger(in, pos)
		if at < 0 {
			break
		}
		keyStart, keyEnd := at, at+len(word)
		for keyStart > pos && isKeyByte(in[keyStart-1]) {
			keyStart--
		}
		for keyEnd < len(in) && isKeyByte(in[keyEnd]) {
			keyEnd++
		}
		valStart := separatorEnd(in, keyEnd)
		if valStart < 0 || !isSensitiveKey(in[keyStart:keyEnd]) {
			pos = max(keyEnd, valStart)
			continue
		}
		end, open, closing := kvValueEnd(in, valStart)
		if end == valStart {
			pos = valStart
			continue
		}
		if b.Len() == 0 {
			b.Grow(len(in))
		}
		b.WriteString(in[last:valStart])
		b.WriteString(open)
		b.WriteString(redacted)
		b.WriteString(closing)
		last, pos = end, end
	}
	if last == 0 {
		return in
	}
	b.WriteString(in[last:])
	return b.String()
}

// nextTrigger returns the first occurrence at or after pos of a trigger word, in any case, or -1.
func nextTrigger(in string, pos int) (int, string) {
	for i := pos; i < len(in); i++ {
		c := in[i] | 0x20 // lower case for letters; other bytes never match a trigger's first letter
		switch c {
		case 't', 's', 'p', 'a', 'k', 'c', 'j', 'd':
		default:
			continue
		}
		for _, w := range kvTriggers {
			if w[0] == c && len(in)-i >= len(w) && strings.EqualFold(in[i:i+len(w)], w) {
				return i, w
			}
		}
	}
	return -1, ""
}

// separatorEnd returns where the value starts if a key/value separator begins at in[i]: an optional
// closing quote (escaped any number of times), blanks, ':' or '=', blanks. Otherwise -1.
func separatorEnd(in string, i int) int {
	j := i
	for j < len(in) && in[j] == '\\' {
		j++
	}
	if j < len(in) && (in[j] == '"' || in[j] == '\'') {
		i = j + 1
	}
	for i < len(in) && (in[i] == ' ' || in[i] == '\t') {
		i++
	}
	if i == len(in) || in[i] != ':' && in[i] != '=' {
		return -1
	}
	i++
	for i < len(in) && (in[i] == ' ' || in[i] == '\t') {
		i++
	}
	return i
}

func isKeyByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
}

// kvValueEnd finds the end of the value that starts at in[i], and the quoting to keep around its
// replacement. A quoted value may be escaped any number of times (\"…\" inside a JSON string, \\\"…\\\"
// inside one more); it ends at the first quote preceded by exactly as many backslashes as the opening
// one, so an escaped quote inside it never ends it early (a doubtful end makes the value longer, not
// shorter). An unterminated quoted value runs to the end of the line. "Bearer x" and "Basic x" are one
// value. An unquoted value runs to whitespace or one of , ; & " '. end == i means there is no value.
func kvValueEnd(in string, i int) (end int, open, closing string) {
	rest := in[i:]
	for _, scheme := range []string{"bearer ", "basic "} {
		if len(rest) < len(scheme) || !strings.EqualFold(rest[:len(scheme)], scheme) {
			continue
		}
		j := len(scheme)
		for j < len(rest) && rest[j] == ' ' {
			j++
		}
		if n := unquotedLen(rest[j:]); n > 0 {
			return i + j + n, "", ""
		}
	}
	k := 0
	for k < len(rest) && rest[k] == '\\' {
		k++
	}
	if k < len(rest) && (rest[k] == '"' || rest[k] == '\'') {
		q := rest[k]
		open = rest[:k+1]
		for j := k + 1; j < len(rest); j++ {
			switch rest[j] {
			case '\n':
				return i + j, open, ""
			case q:
				r := 0
				for r < j-k-1 && rest[j-1-r] == '\\' {
					r++
				}
				if r == k {
					return i + j + 1, open, rest[j-k : j+1]
				}
			}
		}
		return len(in), open, ""
	}
	return i + unquotedLen(rest), "", ""
}

// unquotedLen is the length of the unquoted value at the start of s.
func unquotedLen(s string) int {
	for j := 0; j < len(s); j++ {
		switch s[j] {
		case ' ', '\t', '\n', '\r', '\v', '\f', ',', ';', '&', '"', '\'':
			return j
		}
	}
	return len(s)
}

// containsFold reports whether s contains the lower-case ASCII word sub, in any case, without
// allocating.
func containsFold(s, sub string) bool {
	first := string([]byte{sub[0], sub[0] - 'a' + 'A'})
	for i := 0; i+len(sub) <= len(s); i++ {
		j := strings.IndexAny(s[i:], first)
		if j < 0 {
			return false
		}
		i += j
		if i+len(sub) <= len(s) && strings.EqualFold(s[i:i+len(sub)], sub) {
			return true
		}
	}
	return false
}
