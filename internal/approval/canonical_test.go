package approval

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"testing"
)

func TestCanonicalParams(t *testing.T) {
	tests := []struct {
		name   string
		params map[string]any
		want   string
	}{
		{name: "nil", params: nil, want: `{}`},
		{name: "empty", params: map[string]any{}, want: `{}`},
		{
			name:   "sorted keys and types",
			params: map[string]any{"b": true, "a": "x", "c": 3, "B": false},
			want:   `{"B":false,"a":"x","b":true,"c":3}`,
		},
		{name: "no HTML escaping", params: map[string]any{"q": "<a href='x'>&</a>"}, want: `{"q":"<a href='x'>&</a>"}`},
		{
			name:   "control characters",
			params: map[string]any{"s": "a\"b\\c\nd\te\x01\x1f\b\f\r"},
			want:   `{"s":"a\"b\\c\nd\te\u0001\u001f\b\f\r"}`,
		},
		{name: "line separators kept", params: map[string]any{"s": "\u2028\u2029é😀"}, want: "{\"s\":\"\u2028\u2029é😀\"}"},
		{name: "slash not escaped", params: map[string]any{"p": "a/b"}, want: `{"p":"a/b"}`},
		{
			name: "integer kinds",
			params: map[string]any{
				"a": int8(-8), "b": int16(16), "c": int32(-32), "d": int64(64), "e": uint(1), "f": uint8(8),
				"g": uint16(16), "h": uint32(32), "i": uint64(64),
			},
			want: `{"a":-8,"b":16,"c":-32,"d":64,"e":1,"f":8,"g":16,"h":32,"i":64}`,
		},
		{name: "integral float", params: map[string]any{"n": 3.0, "z": math.Copysign(0, -1)}, want: `{"n":3,"z":0}`},
		{
			name:   "json numbers",
			params: map[string]any{"a": json.Number("42"), "b": json.Number("1e2"), "c": json.Number("-0"), "d": json.Number("7.0")},
			want:   `{"a":42,"b":100,"c":0,"d":7}`,
		},
		{name: "largest safe integer", params: map[string]any{"n": int64(MaxSafeInteger), "m": -MaxSafeInteger}, want: `{"m":-9007199254740991,"n":9007199254740991}`},
		{
			// RFC 8785 sorts by UTF-16 code units: U+1F600 (D83D DE00) sorts before U+E000, although its UTF-8
			// bytes sort after.
			name:   "UTF-16 key order",
			params: map[string]any{"\ue000": 1, "😀": 2, "z": 3},
			want:   "{\"z\":3,\"😀\":2,\"\ue000\":1}",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := CanonicalParams(tt.params)
			if err != nil {
				t.Fatalf("CanonicalParams: %v", err)
			}
			if string(got) != tt.want {
				t.Errorf("CanonicalParams = %s, want %s", got, tt.want)
			}
			if !json.Valid(got) {
				t.Errorf("output is not valid JSON: %s", got)
			}
		})
	}
}

func TestCanonicalParamsRejects(t *testing.T) {
	tests := []struct {
		name   string
		params map[string]any
	}{
		{"nested object", map[string]any{"a": map[string]any{"b": 1}}},
		{"array", map[string]any{"a": []any{1}}},
		{"string slice", map[string]any{"a": []string{"x"}}},
		{"fraction", map[string]any{"a": 1.5}},
		{"NaN", map[string]any{"a": math.NaN()}},
		{"infinity", map[string]any{"a": math.Inf(1)}},
		{"null", map[string]any{"a": nil}},
		{"invalid UTF-8 value", map[string]any{"a": "\xff"}},
		{"invalid UTF-8 key", map[string]any{"\xff": "a"}},
		{"empty key", map[string]any{"": "a"}},
		{"beyond 2^53", map[string]any{"a": int64(MaxSafeInteger + 1)}},
		{"below -2^53", map[string]any{"a": int64(-MaxSafeInteger - 1)}},
		{"large uint", map[string]any{"a": uint64(math.MaxUint64)}},
		{"large float", map[string]any{"a": 1e300}},
		{"fractional json number", map[string]any{"a": json.Number("1.5")}},
		{"bad json number", map[string]any{"a": json.Number("x")}},
		{"float32", map[string]any{"a": float32(1)}},
		{"struct", map[string]any{"a": struct{}{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, err := CanonicalParams(tt.params); !errors.Is(err, ErrInvalidParams) {
				t.Fatalf("CanonicalParams = %s, %v; want ErrInvalidParams", got, err)
			}
			if _, err := ParamsHash("tool", tt.params); !errors.Is(err, ErrInvalidParams) {
				t.Fatalf("ParamsHash error = %v; want ErrInvalidParams", err)
			}
		})
	}
}

func TestParamsHash(t *testing.T) {
	sum := func(s string) string {
		h := sha256.Sum256([]byte(s))
		return hex.EncodeToString(h[:])
	}
	tests := []struct {
		name   string
		tool   string
		params map[string]any
		want   string
	}{
		{"documented form", "kubectl_delete", map[string]any{"name": "web", "replicas": 3, "force": true},
			sum(`{"params":{"force":true,"name":"web","replicas":3},"tool":"kubectl_delete"}`)},
		{"no params", "t", nil, sum(`{"params":{},"tool":"t"}`)},
		{"tool is escaped", "a\"b", nil, sum(`{"params":{},"tool":"a\"b"}`)},
		{"float and int agree", "t", map[string]any{"n": 2.0}, sum(`{"params":{"n":2},"tool":"t"}`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParamsHash(tt.tool, tt.params)
			if err != nil {
				t.Fatalf("ParamsHash: %v", err)
			}
			if got != tt.want {
				t.Errorf("ParamsHash = %s, want %s", got, tt.want)
			}
			if !isParamsHash(got) {
				t.Errorf("ParamsHash %q is not lower-case hex SHA-256", got)
			}
		})
	}
	if _, err := ParamsHash("", nil); !errors.Is(err, ErrInvalidParams) {
		t.Errorf("empty tool: err = %v, want ErrInvalidParams", err)
	}
	if _, err := ParamsHash("\xff", nil); !errors.Is(err, ErrInvalidParams) {
		t.Errorf("invalid tool: err = %v, want ErrInvalidParams", err)
	}
	a, _ := ParamsHash("t", map[string]any{"a": "1"})
	b, _ := ParamsHash("u", map[string]any{"a": "1"})
	c, _ := ParamsHash("t", map[string]any{"a": 1})
	if a == b || a == c {
		t.Errorf("different calls share a hash: %s %s %s", a, b, c)
	}
}

func TestDecodeCanonicalParamsRoundTrip(t *testing.T) {
	in := map[string]any{"s": "x", "b": true, "n": 5, "f": 6.0}
	canon, err := CanonicalParams(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeCanonicalParams(canon)
	if err != nil {
		t.Fatal(err)
	}
	if out["n"] != int64(5) || out["f"] != int64(6) || out["s"] != "x" || out["b"] != true {
		t.Errorf("decoded %#v", out)
	}
	again, err := CanonicalParams(out)
	if err != nil || !bytes.Equal(again, canon) {
		t.Errorf("re-canonicalised = %s, %v; want %s", again, err, canon)
	}
}

// FuzzCanonicalParams checks that canonicalisation never panics, always emits valid JSON, and is a fixed
// point: decoding its output and canonicalising again gives the same bytes, however the output is decoded.
func FuzzCanonicalParams(f *testing.F) {
	for _, seed := range []string{
		`{}`, `{"a":1,"b":"x","c":true}`, `{"z":1e2,"a":-0,"m":"\u2028<&>"}`, `{"\ue000":1,"😀":2}`,
		`{"a":{"b":1}}`, `{"a":[1]}`, `{"a":1.5}`, `{"a":null}`, `{"":1}`, `{"a":9007199254740993}`,
		`{"a":"\ud800"}`, `{"a":"\u0000\u001f"}`, `[]`, `"x"`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			return
		}
		c1, err := CanonicalParams(m)
		if err != nil {
			if !errors.Is(err, ErrInvalidParams) {
				t.Fatalf("error does not wrap ErrInvalidParams: %v", err)
			}
			return
		}
		if !json.Valid(c1) {
			t.Fatalf("invalid JSON output %q", c1)
		}
		if _, err := ParamsHash("tool", m); err != nil {
			t.Fatalf("ParamsHash fails where CanonicalParams succeeded: %v", err)
		}
		// Decoded as json.Number.
		m2, err := DecodeCanonicalParams(c1)
		if err != nil {
			t.Fatalf("decode %q: %v", c1, err)
		}
		c2, err := CanonicalParams(m2)
		if err != nil || !bytes.Equal(c1, c2) {
			t.Fatalf("not a fixed point: %q -> %q (%v)", c1, c2, err)
		}
		// Decoded as float64, as a caller using plain json.Unmarshal would.
		var m3 map[string]any
		if err := json.Unmarshal(c1, &m3); err != nil {
			t.Fatalf("unmarshal %q: %v", c1, err)
		}
		c3, err := CanonicalParams(m3)
		if err != nil || !bytes.Equal(c1, c3) {
			t.Fatalf("not a fixed point via float64: %q -> %q (%v)", c1, c3, err)
		}
	})
}
