package audit

import (
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Replacement texts. They contain no character that the secret patterns below can match, so scrubbing
// is idempotent and a replacement never forms a new match with its neighbours.
const (
	redacted          = "<redacted>"
	redactedJWT       = "<redacted:jwt>"
	redactedPEM       = "<redacted:pem>"
	redactedVault     = "<redacted:vault-token>"
	redactedBearer    = "Bearer <redacted>"
	maxScrubDepth     = 64
	tooDeep           = "<truncated:too-deep>"
	unencodableFormat = "<unencodable:%T>"
)

// sensitiveKeyParts are the substrings that make a map key's value secret. Keys are compared after
// lower-casing and turning '-', '.' and ' ' into '_', so "Client-Key", "client.key" and "client_key"
// are one key, and camelCase spellings ("privateKey", "clientKey", "apiKey") are listed on their own.
var sensitiveKeyParts = []string{
	"token", "secret", "password", "passwd", "passphrase", "authorization",
	"private_key", "privatekey", "credential", "client_key", "clientkey",
	"jwt", "kubeconfig", "cookie", "api_key", "apikey",
}

// metadataKeys is the explicit allowlist of keys that contain a sensitive word but name metadata, not a
// secret; their values are kept (and still string-scrubbed). The comparison is on the whole normalised
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

// scrubber holds the compiled secret patterns. It is immutable once built.
type scrubber struct {
	pem    *regexp.Regexp
	vault  *regexp.Regexp
	bearer *regexp.Regexp
	kv     *regexp.Regexp
	jwt    *regexp.Regexp
}

// newScrubber compiles the secret patterns.
func newScrubber() *scrubber {
	return &scrubber{
		// A PEM block, or, if it was cut short, everything from its BEGIN line on.
		pem: regexp.MustCompile(`(?s)-----BEGIN [^\n]*?-----(?:.*?-----END [^\n]*?-----|.*)`),
		// Vault service, batch and recovery tokens.
		vault: regexp.MustCompile(`hv[sbr]\.[A-Za-z0-9_-]{20,}`),
		// An HTTP bearer credential.
		bearer: regexp.MustCompile(`(?i)\bbearer\s+[A-Za-z0-9._~+/-]+=*`),
		// key=value, key: value and "key":"value" inside free text (error messages, command output,
		// kubeconfig YAML) where the key looks sensitive.
		kv: regexp.MustCompile(`(?i)([a-z0-9_.-]*(?:token|secret|passw(?:or)?d|passphrase|authorization|private[_.-]?key|credential|client[_.-]?key|jwt|kubeconfig|cookie|api[_.-]?key)[a-z0-9_.-]*)(["']?[ \t]*[:=][ \t]*)((?:bearer|basic) +<redacted>|(?:bearer|basic) +[^\s,;&"'<>]+|"[^"\n]*"|'[^'\n]*'|[^\s,;&"'<>]+)`),
		// A JWT (JWS compact form): base64url header starting with {" then payload and signature.
		jwt: regexp.MustCompile(`eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*`),
	}
}

// defaultScrubber is never modified after initialisation; sharing it avoids recompiling per call.
var defaultScrubber = newScrubber()

// ScrubString replaces secrets inside free text: JWTs with "<redacted:jwt>", PEM blocks with
// "<redacted:pem>", Vault tokens (hvs./hvb./hvr.) with "<redacted:vault-token>", "Bearer x" with
// "Bearer <redacted>", and the value of key=value / key: value pairs whose key looks sensitive (see
// Scrub) with "<redacted>".
func ScrubString(s string) string { return defaultScrubber.str(s) }

// Scrub returns a copy of v with secrets removed, recursively. Strings go through ScrubString. Maps
// become map[string]any; a value whose key contains token, secret, password, passwd, passphrase,
// authorization, private_key, privatekey, credential, client_key, jwt, kubeconfig, cookie or api_key
// (case-insensitively, '-' and '.' counting as '_') becomes "<redacted>", whatever its type, unless the
// key is one of the metadata keys lease_id, token_ttl, ttl, scope, token_id, approval_token_id,
// credential_scope and credential_ttl. Slices and arrays become []any. Structs and other values with a
// JSON form are marshalled to JSON and the generic form is scrubbed, so their JSON field names count as
// keys. Byte slices are treated as text (or replaced by a length if not UTF-8), errors by their message.
// Numbers and booleans are kept; values with no JSON form become a "<unencodable:T>" note.
func Scrub(v any) any { return defaultScrubber.value(v, 0) }

// scrubFields scrubs an event's fields, always returning a non-nil map.
func scrubFields(fields map[string]any) map[string]any {
	out, _ := defaultScrubber.value(fields, 0).(map[string]any)
	if out == nil {
		out = map[string]any{}
	}
	return out
}

// isSensitiveKey reports whether a map value under key must be redacted whole.
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
	return false
}

func (s *scrubber) str(in string) string {
	out := in
	if strings.Contains(out, "-----BEGIN ") {
		out = s.pem.ReplaceAllLiteralString(out, redactedPEM)
	}
	if strings.Contains(out, "hv") {
		out = s.vault.ReplaceAllLiteralString(out, redactedVault)
	}
	if containsFold(out, "bearer") {
		out = s.bearer.ReplaceAllLiteralString(out, redactedBearer)
	}
	if strings.ContainsAny(out, ":=") {
		out = s.kv.ReplaceAllStringFunc(out, s.kvValue)
	}
	// JWTs last, so no earlier replacement can leave a JWT-shaped string behind.
	if strings.Contains(out, "eyJ") {
		out = s.jwt.ReplaceAllLiteralString(out, redactedJWT)
	}
	return out
}

// kvValue rewrites one key/value match, keeping the key and separator, unless the key is metadata.
func (s *scrubber) kvValue(m string) string {
	sub := s.kv.FindStringSubmatch(m)
	if len(sub) != 4 || !isSensitiveKey(sub[1]) {
		return m
	}
	val := sub[3]
	switch {
	case strings.HasPrefix(val, `"`):
		val = `"` + redacted + `"`
	case strings.HasPrefix(val, `'`):
		val = `'` + redacted + `'`
	default:
		val = redacted
	}
	return sub[1] + sub[2] + val
}

func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), sub)
}

var (
	jsonMarshalerType = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
)

// value scrubs one value of any type; depth bounds recursion through cyclic or absurdly deep values.
func (s *scrubber) value(v any, depth int) any {
	if depth > maxScrubDepth {
		return tooDeep
	}
	switch t := v.(type) {
	case nil:
		return nil
	case string:
		return s.str(t)
	case json.Number:
		if _, err := strconv.ParseFloat(string(t), 64); err == nil && json.Valid([]byte(t)) {
			return t
		}
		return s.str(string(t))
	case []byte:
		if utf8.Valid(t) {
			return s.str(string(t))
		}
		return fmt.Sprintf("<binary:%d bytes>", len(t))
	case bool, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, uintptr:
		return t
	case float64:
		return finite(t)
	case float32:
		return finite(float64(t))
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			s.put(out, k, e, depth)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = s.value(e, depth+1)
		}
		return out
	}

	rv := reflect.ValueOf(v)
	rt := rv.Type()
	if rt.Implements(jsonMarshalerType) || rt.Implements(textMarshalerType) {
		return s.viaJSON(v, depth)
	}
	if err, ok := v.(error); ok {
		return s.str(err.Error())
	}
	switch rv.Kind() {
	case reflect.Pointer, reflect.Interface:
		if rv.IsNil() {
			return nil
		}
		return s.value(rv.Elem().Interface(), depth+1)
	case reflect.Map:
		if rt.Key().Kind() != reflect.String {
			return s.viaJSON(v, depth)
		}
		if rv.IsNil() {
			return nil
		}
		out := make(map[string]any, rv.Len())
		iter := rv.MapRange()
		for iter.Next() {
			s.put(out, iter.Key().String(), iter.Value().Interface(), depth)
		}
		return out
	case reflect.Slice, reflect.Array:
		if rv.Kind() == reflect.Slice && rv.IsNil() {
			return nil
		}
		out := make([]any, rv.Len())
		for i := range out {
			out[i] = s.value(rv.Index(i).Interface(), depth+1)
		}
		return out
	case reflect.String:
		return s.str(rv.String())
	case reflect.Bool:
		return rv.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return rv.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return rv.Uint()
	case reflect.Float32, reflect.Float64:
		return finite(rv.Float())
	case reflect.Struct:
		return s.viaJSON(v, depth)
	default:
		return fmt.Sprintf(unencodableFormat, v)
	}
}

// put stores the scrubbed e under the scrubbed key k, redacting it whole if k is sensitive.
func (s *scrubber) put(out map[string]any, k string, e any, depth int) {
	if isSensitiveKey(k) {
		out[s.str(k)] = redacted
		return
	}
	out[s.str(k)] = s.value(e, depth+1)
}

// viaJSON scrubs v's generic JSON form: struct field names become map keys and so are checked as keys.
func (s *scrubber) viaJSON(v any, depth int) any {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf(unencodableFormat, v)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var g any
	if err := dec.Decode(&g); err != nil {
		return fmt.Sprintf(unencodableFormat, v)
	}
	return s.value(g, depth+1)
}

// finite keeps f unless JSON cannot represent it.
func finite(f float64) any {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return strconv.FormatFloat(f, 'g', -1, 64)
	}
	return f
}
