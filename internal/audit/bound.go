package audit

import (
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/agent-sandbox/agent-sandbox/internal/scrub"
)

// Size bounds of an event. A caller controls much of what it records (a tool call's arguments come from
// the agent), so no event may cost more than a bounded line, however large its values.
const (
	// MaxStringBytes is the longest string an event keeps. A longer string value (also a byte slice or a
	// json.Number) in the fields is replaced, before scrubbing, by the object
	//
	//	{"truncated": true, "bytes": <its length>, "sha256": "<hex SHA-256 of the original bytes>"}
	//
	// which keeps it identifiable (whoever holds the original can match it) without keeping any of it.
	// A longer request ID, event name or tool name becomes the string
	// "<truncated:N-bytes:sha256:HEX>", and a longer map key becomes the key
	// "<truncated-key:N-bytes:sha256:HEX>" with its value replaced by "<redacted>", since whether
	// such a key names a secret cannot be told cheaply.
	MaxStringBytes = 1 << 10
	// MaxLineBytes bounds one encoded line, without its '\n'. If the encoded line with the scrubbed
	// fields would be longer (many fields, each under MaxStringBytes), the fields are replaced by
	//
	//	{"truncated": true, "bytes": <length of the encoded fields>, "sha256": "<hex SHA-256 of them>"}
	//
	// The rest of a line is bounded by MaxStringBytes, so the replacement always fits.
	MaxLineBytes = 64 << 10
)

// Members of the objects that stand for a truncated value.
const (
	// FieldTruncated is true in an object that replaces a value too long to keep.
	FieldTruncated = "truncated"
	// FieldTruncatedBytes is the length in bytes of the value that was replaced.
	FieldTruncatedBytes = "bytes"
	// FieldTruncatedSHA256 is the hex SHA-256 of the value that was replaced.
	FieldTruncatedSHA256 = "sha256"
)

// maxBoundDepth matches the depth to which package scrub follows nested values.
const maxBoundDepth = 64

var (
	jsonMarshalerType = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
)

// truncated is the object that replaces a value of n bytes with hash sum.
func truncated(n int, sum string) map[string]any {
	return map[string]any{FieldTruncated: true, FieldTruncatedBytes: n, FieldTruncatedSHA256: sum}
}

// truncatedString replaces s if it is longer than MaxStringBytes.
func truncatedString[T ~string | ~[]byte](s T) (map[string]any, bool) {
	if len(s) <= MaxStringBytes {
		return nil, false
	}
	return truncated(len(s), hashOf(s)), true
}

// hashOf is the hex SHA-256 of s, without copying it.
func hashOf[T ~string | ~[]byte](s T) string {
	h := sha256.New()
	_, _ = h.Write([]byte(s)) // the compiler does not copy a string converted for a call like this
	return hex.EncodeToString(h.Sum(nil))
}

// boundHeader bounds the request ID, event name or tool name of an event.
func boundHeader(s string) string {
	if len(s) <= MaxStringBytes {
		return s
	}
	return fmt.Sprintf("<truncated:%d-bytes:sha256:%s>", len(s), hashOf(s))
}

// bound returns v with every string longer than MaxStringBytes replaced as MaxStringBytes describes. It
// runs before scrubbing, so the scrubber never sees (nor spends time on) a huge value, and it follows the
// same types the scrubber does (maps, slices, pointers, JSON forms of structs and marshalers, error
// messages); what it returns is generic (map[string]any, []any, strings, numbers) wherever it had to
// look inside, and v's own values elsewhere. v is not modified.
func bound(v any, depth int) any {
	if depth > maxBoundDepth {
		return "<truncated:too-deep>"
	}
	switch t := v.(type) {
	case nil, bool, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, uintptr, float32, float64:
		return t
	case string:
		if m, ok := truncatedString(t); ok {
			return m
		}
		return t
	case json.Number:
		if m, ok := truncatedString(t); ok {
			return m
		}
		return t
	case []byte:
		if m, ok := truncatedString(t); ok {
			return m
		}
		return t
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			putBounded(out, k, e, depth)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = bound(e, depth+1)
		}
		return out
	}

	rv := reflect.ValueOf(v)
	rt := rv.Type()
	if rt.Implements(jsonMarshalerType) || rt.Implements(textMarshalerType) {
		return boundViaJSON(v, depth)
	}
	if err, ok := v.(error); ok {
		return bound(err.Error(), depth)
	}
	switch rv.Kind() {
	case reflect.Pointer, reflect.Interface:
		if rv.IsNil() {
			return nil
		}
		return bound(rv.Elem().Interface(), depth+1)
	case reflect.Map:
		if rt.Key().Kind() != reflect.String {
			return boundViaJSON(v, depth)
		}
		if rv.IsNil() {
			return nil
		}
		out := make(map[string]any, rv.Len())
		iter := rv.MapRange()
		for iter.Next() {
			putBounded(out, iter.Key().String(), iter.Value().Interface(), depth)
		}
		return out
	case reflect.Slice, reflect.Array:
		if rv.Kind() == reflect.Slice && rv.IsNil() {
			return nil
		}
		out := make([]any, rv.Len())
		for i := range out {
			out[i] = bound(rv.Index(i).Interface(), depth+1)
		}
		return out
	case reflect.String:
		return bound(rv.String(), depth)
	case reflect.Struct:
		return boundViaJSON(v, depth)
	}
	return v
}

// putBounded stores e, bounded, under k, or a long k's summary.
func putBounded(out map[string]any, k string, e any, depth int) {
	if len(k) > MaxStringBytes {
		out[fmt.Sprintf("<truncated-key:%d-bytes:sha256:%s>", len(k), hashOf(k))] = "<redacted>"
		return
	}
	out[k] = bound(e, depth+1)
}

// boundViaJSON bounds v's generic JSON form, as the scrubber would see it. A value without one is left
// to the scrubber, which notes it as unencodable.
func boundViaJSON(v any, depth int) any {
	g, err := scrub.JSONForm(v)
	if err != nil {
		return v
	}
	return bound(g, depth+1)
}

// boundFields replaces fields whose encoding would make the line longer than MaxLineBytes. encoded is
// the line as encoded with them.
func boundFields(fields map[string]any, encoded []byte) (map[string]any, error) {
	if len(encoded) <= MaxLineBytes {
		return fields, nil
	}
	b, err := encodeJSON(fields)
	if err != nil {
		return nil, err
	}
	return truncated(len(b), hashOf(b)), nil
}

// Summarize returns v, or, when v is longer than maxBytes, the object that stands for a truncated value:
// {"truncated": true, "bytes": N, "sha256": "<hex SHA-256>"} of a string's own bytes, or of any other
// value's JSON encoding (maps encode with sorted keys, so whoever holds the original value can match the
// summary). A value that cannot be encoded is returned as it is (Write notes it as unencodable).
func Summarize(v any, maxBytes int) any {
	if s, ok := v.(string); ok {
		if len(s) <= maxBytes {
			return s
		}
		return truncated(len(s), hashOf(s))
	}
	b, err := json.Marshal(v)
	if err != nil || len(b) <= maxBytes {
		return v
	}
	return truncated(len(b), hashOf(b))
}
