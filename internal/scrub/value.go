package scrub

import (
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
)

const (
	// maxDepth bounds recursion through cyclic or absurdly deep values.
	maxDepth          = 64
	tooDeep           = "<truncated:too-deep>"
	unencodableFormat = "<unencodable:%T>"
)

var (
	jsonMarshalerType = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
)

// Value returns a copy of v with secrets removed, recursively; v itself is not modified. Strings go
// through String. Maps become map[string]any; a value whose key is sensitive becomes "<redacted>",
// whatever its type. A key is sensitive if, lower-cased with '-', '.' and ' ' counting as '_', it
// contains token, secret, password, passwd, passphrase, authorization, private_key, privatekey,
// credential, client_key, clientkey, jwt, kubeconfig, cookie, api_key or apikey, or has pwd, pass,
// auth or dsn as a whole word (so "db_pass" and "basicAuth" are sensitive, "authority" and "bypass"
// are not), unless it is one of the metadata keys lease_id, token_ttl, ttl, scope, token_id,
// approval_token_id, credential_scope and credential_ttl. Keys are scrubbed as text too. Slices and
// arrays become []any. Structs and other values with a JSON form are marshalled to JSON and the
// generic form is scrubbed, so their JSON field names count as keys. Byte slices are treated as text
// (or replaced by a length if not UTF-8), errors by their message. Numbers and booleans are kept;
// values with no JSON form become a "<unencodable:T>" note, and nesting deeper than 64 levels a
// "<truncated:too-deep>" note.
func (s *Scrubber) Value(v any) any { return s.value(v, 0) }

func (s *Scrubber) value(v any, depth int) any {
	if depth > maxDepth {
		return tooDeep
	}
	switch t := v.(type) {
	case nil:
		return nil
	case string:
		return s.String(t)
	case json.Number:
		if _, err := strconv.ParseFloat(string(t), 64); err == nil && json.Valid([]byte(t)) && !s.containsSecret(string(t)) {
			return t
		}
		return s.String(string(t))
	case []byte:
		if utf8.Valid(t) {
			return s.String(string(t))
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
		return s.String(err.Error())
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
		return s.String(rv.String())
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

// Holds reports whether b contains one of the Scrubber's exact values or one of their encodings (see New).
// It applies no pattern: it is for binary data (a saved plan, an archive's entries), which patterns would
// misread. The nil Scrubber holds no value and reports false.
func (s *Scrubber) Holds(b []byte) bool { return s.containsSecret(string(b)) }

// holdsChunk is how much HoldsIn reads at a time.
const holdsChunk = 64 << 10

// HoldsIn is Holds for everything r yields, read in bounded pieces (a value cut between two pieces is still
// found), so that the memory it takes does not grow with the data. It reads r to its end unless it finds a
// value first; a read error is returned.
func (s *Scrubber) HoldsIn(r io.Reader) (bool, error) {
	if s == nil || len(s.forms) == 0 {
		_, err := io.Copy(io.Discard, r)
		return false, err
	}
	keep := len(s.forms[0]) - 1 // the longest form (forms are sorted longest first), less one byte
	buf := make([]byte, 0, keep+holdsChunk)
	piece := make([]byte, holdsChunk)
	for {
		n, err := r.Read(piece)
		buf = append(buf, piece[:n]...)
		if s.containsSecret(string(buf)) {
			return true, nil
		}
		if len(buf) > keep {
			buf = append(buf[:0], buf[len(buf)-keep:]...)
		}
		if err == io.EOF {
			return false, nil
		}
		if err != nil {
			return false, err
		}
	}
}

// containsSecret reports whether text holds one of the exact values (a numeric secret in a number).
func (s *Scrubber) containsSecret(text string) bool {
	if s == nil {
		return false
	}
	for _, f := range s.forms {
		if strings.Contains(text, f) {
			return true
		}
	}
	return false
}

// put stores the scrubbed e under the scrubbed key k, redacting it whole if k is sensitive.
func (s *Scrubber) put(out map[string]any, k string, e any, depth int) {
	if isSensitiveKey(k) {
		out[s.String(k)] = redacted
		return
	}
	out[s.String(k)] = s.value(e, depth+1)
}

// viaJSON scrubs v's generic JSON form: struct field names become map keys and so are checked as keys.
func (s *Scrubber) viaJSON(v any, depth int) any {
	g, err := JSONForm(v)
	if err != nil {
		return fmt.Sprintf(unencodableFormat, v)
	}
	return s.value(g, depth+1)
}

// JSONForm is v's generic JSON form, the one in which Value scrubs a struct, a marshaler or a map whose
// keys are not strings: map[string]any, []any, strings, json.Number, booleans and nil, with struct field
// names as map keys. It fails for a value that has no JSON form. Package audit bounds the same form before
// scrubbing, so both see one value alike.
func JSONForm(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var g any
	if err := dec.Decode(&g); err != nil {
		return nil, err
	}
	return g, nil
}

// finite keeps f unless JSON cannot represent it.
func finite(f float64) any {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return strconv.FormatFloat(f, 'g', -1, 64)
	}
	return f
}
