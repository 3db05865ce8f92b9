package approval

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/agent-sandbox/agent-sandbox/internal/sha256hex"
)

// ErrInvalidParams is returned when tool parameters cannot be put in canonical form.
var ErrInvalidParams = errors.New("invalid parameters")

// MaxSafeInteger is the largest integer magnitude a parameter may have: 2^53-1, the largest integer every JSON
// implementation (including JavaScript's) reads back exactly. Larger values are refused rather than rounded.
const MaxSafeInteger = 1<<53 - 1

// CanonicalParams returns the canonical JSON encoding of a tool call's parameters. The MCP server, the approval
// CLI and the admission webhook all hash this encoding, so it must never change for a given input.
//
// The encoding is the JSON Canonicalization Scheme (RFC 8785) restricted to a flat object:
//
//   - the value is one JSON object; a nil or empty map encodes as {};
//   - keys are non-empty, valid UTF-8, and sorted by their UTF-16 code units (RFC 8785 section 3.2.3; for
//     ASCII keys this is plain byte order);
//   - values are strings (valid UTF-8), booleans, or integers of magnitude at most MaxSafeInteger, given as
//     any Go integer type, a float64 with an integral value, or an integral json.Number;
//   - integers are written in decimal without exponent, fraction, leading zeros or "-0";
//   - strings escape only '"', '\\' and control characters below U+0020 (as \b \t \n \f \r or \u00xx, lower-case
//     hex); everything else, including '<', '>', '&', U+2028 and U+2029, is written as is;
//   - there is no whitespace outside strings.
//
// Anything else (null, nested objects, arrays, fractions, NaN, infinities, invalid UTF-8, empty keys) is an
// error wrapping ErrInvalidParams: parameters that cannot be compared exactly cannot be approved exactly.
func CanonicalParams(params map[string]any) ([]byte, error) {
	var buf bytes.Buffer
	if err := writeCanonicalObject(&buf, params); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ParamsHash returns the lower-case hex SHA-256 of the canonical JSON object {"params":P,"tool":T}, where P is
// CanonicalParams(params) and T the tool name as a JSON string. This is the value approval tokens carry as
// params_hash and the admission webhook recomputes from the Job it admits.
func ParamsHash(tool string, params map[string]any) (string, error) {
	if tool == "" {
		return "", fmt.Errorf("%w: empty tool name", ErrInvalidParams)
	}
	if !utf8.ValidString(tool) {
		return "", fmt.Errorf("%w: tool name is not valid UTF-8", ErrInvalidParams)
	}
	var buf bytes.Buffer
	buf.WriteString(`{"params":`)
	if err := writeCanonicalObject(&buf, params); err != nil {
		return "", err
	}
	buf.WriteString(`,"tool":`)
	writeCanonicalString(&buf, tool)
	buf.WriteByte('}')
	return sha256hex.Of(buf.Bytes()), nil
}

// isParamsHash reports whether s looks like a ParamsHash result.
func isParamsHash(s string) bool { return sha256hex.Valid(s) }

func writeCanonicalObject(buf *bytes.Buffer, params map[string]any) error {
	keys := make([]string, 0, len(params))
	for k := range params {
		if k == "" {
			return fmt.Errorf("%w: empty key", ErrInvalidParams)
		}
		if !utf8.ValidString(k) {
			return fmt.Errorf("%w: key %q is not valid UTF-8", ErrInvalidParams, k)
		}
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareUTF16)
	buf.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			buf.WriteByte(',')
		}
		writeCanonicalString(buf, k)
		buf.WriteByte(':')
		if err := writeCanonicalValue(buf, params[k]); err != nil {
			return fmt.Errorf("parameter %q: %w", k, err)
		}
	}
	buf.WriteByte('}')
	return nil
}

func writeCanonicalValue(buf *bytes.Buffer, v any) error {
	switch v := v.(type) {
	case string:
		if !utf8.ValidString(v) {
			return fmt.Errorf("%w: string is not valid UTF-8", ErrInvalidParams)
		}
		writeCanonicalString(buf, v)
		return nil
	case bool:
		buf.WriteString(strconv.FormatBool(v))
		return nil
	case int:
		return writeInt(buf, int64(v))
	case int8:
		return writeInt(buf, int64(v))
	case int16:
		return writeInt(buf, int64(v))
	case int32:
		return writeInt(buf, int64(v))
	case int64:
		return writeInt(buf, v)
	case uint:
		return writeUint(buf, uint64(v))
	case uint8:
		return writeUint(buf, uint64(v))
	case uint16:
		return writeUint(buf, uint64(v))
	case uint32:
		return writeUint(buf, uint64(v))
	case uint64:
		return writeUint(buf, v)
	case float64:
		return writeFloat(buf, v)
	case json.Number:
		if n, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			return writeInt(buf, n)
		}
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil {
			return fmt.Errorf("%w: number %q: %w", ErrInvalidParams, string(v), err)
		}
		return writeFloat(buf, f)
	case nil:
		return fmt.Errorf("%w: null is not allowed", ErrInvalidParams)
	default:
		return fmt.Errorf("%w: values must be strings, booleans or integers, not %T", ErrInvalidParams, v)
	}
}

func writeInt(buf *bytes.Buffer, n int64) error {
	if n > MaxSafeInteger || n < -MaxSafeInteger {
		return fmt.Errorf("%w: integer %d is beyond ±2^53-1", ErrInvalidParams, n)
	}
	buf.WriteString(strconv.FormatInt(n, 10))
	return nil
}

func writeUint(buf *bytes.Buffer, n uint64) error {
	if n > MaxSafeInteger {
		return fmt.Errorf("%w: integer %d is beyond 2^53-1", ErrInvalidParams, n)
	}
	buf.WriteString(strconv.FormatUint(n, 10))
	return nil
}

func writeFloat(buf *bytes.Buffer, f float64) error {
	if math.IsNaN(f) || math.IsInf(f, 0) || f != math.Trunc(f) {
		return fmt.Errorf("%w: number %v is not an integer", ErrInvalidParams, f)
	}
	if math.Abs(f) > MaxSafeInteger {
		return fmt.Errorf("%w: integer %v is beyond ±2^53-1", ErrInvalidParams, f)
	}
	// -0 becomes 0, as RFC 8785 requires.
	return writeInt(buf, int64(f))
}

// writeCanonicalString writes s (valid UTF-8) as an RFC 8785 JSON string.
func writeCanonicalString(buf *bytes.Buffer, s string) {
	const hexDigits = "0123456789abcdef"
	buf.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			buf.WriteByte('\\')
			buf.WriteByte(c)
		case c == '\b':
			buf.WriteString(`\b`)
		case c == '\t':
			buf.WriteString(`\t`)
		case c == '\n':
			buf.WriteString(`\n`)
		case c == '\f':
			buf.WriteString(`\f`)
		case c == '\r':
			buf.WriteString(`\r`)
		case c < 0x20:
			buf.WriteString(`\u00`)
			buf.WriteByte(hexDigits[c>>4])
			buf.WriteByte(hexDigits[c&0xf])
		default:
			buf.WriteByte(c)
		}
	}
	buf.WriteByte('"')
}

// compareUTF16 orders strings by their UTF-16 code units, as RFC 8785 requires for object keys.
func compareUTF16(a, b string) int {
	return slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
}

// DecodeCanonicalParams reads parameters stored in canonical form back into the value types CanonicalParams
// accepts: strings, booleans and int64.
func DecodeCanonicalParams(data []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var raw map[string]any
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidParams, err)
	}
	out := make(map[string]any, len(raw))
	for k, v := range raw {
		if n, ok := v.(json.Number); ok {
			i, err := strconv.ParseInt(string(n), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%w: parameter %q: %w", ErrInvalidParams, k, err)
			}
			v = i
		}
		out[k] = v
	}
	return out, nil
}
