package scrub

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/url"
	"strings"
)

// encodings returns v and the forms it commonly takes when it is copied into other text, each at
// least MinSecretLen bytes long (v itself is).
//
//   - JSON-escaped, as the value of a JSON string, and escaped twice, as inside a JSON string that holds
//     JSON; each with and without encoding/json's HTML escaping.
//   - URL-encoded with query escaping (space as '+') and path escaping, with upper- and lower-case hex.
//   - base64 in the standard and URL alphabets. Where v sits inside a larger base64 blob depends on its
//     offset modulo 3, so for each of the three alignments the form is the run of characters that
//     encode only v's bits; the one or two characters at each end that mix in the neighbours' bits are
//     left (they carry at most 4 bits of v). This also covers v encoded alone, padded or not.
func encodings(v string) []string {
	forms := []string{v}
	add := func(f string) {
		if len(f) >= MinSecretLen {
			forms = append(forms, f)
		}
	}
	for _, html := range []bool{false, true} {
		once := jsonEscape(v, html)
		add(once)
		add(jsonEscape(once, html))
	}
	for _, esc := range []string{url.QueryEscape(v), url.PathEscape(v)} {
		add(esc)
		add(lowerHexEscapes(esc))
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
		for shift := range 3 {
			add(base64Core(enc, v, shift))
		}
	}
	return forms
}

// jsonEscape returns the body of v's JSON string (without the quotes).
func jsonEscape(v string, html bool) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(html)
	_ = enc.Encode(v) // a string always encodes
	out := strings.TrimSuffix(b.String(), "\n")
	return out[1 : len(out)-1]
}

// lowerHexEscapes turns the hex digits of %XX escapes to lower case.
func lowerHexEscapes(s string) string {
	b := []byte(s)
	for i := 0; i+2 < len(b); i++ {
		if b[i] == '%' {
			b[i+1] = toLowerHex(b[i+1])
			b[i+2] = toLowerHex(b[i+2])
			i += 2
		}
	}
	return string(b)
}

func toLowerHex(c byte) byte {
	if c >= 'A' && c <= 'F' {
		return c + 'a' - 'A'
	}
	return c
}

// base64Core encodes v as if shift bytes came before it and returns only the characters whose six bits
// all come from v.
func base64Core(enc *base64.Encoding, v string, shift int) string {
	buf := make([]byte, shift+len(v))
	copy(buf[shift:], v)
	s := enc.EncodeToString(buf)
	first := (8*shift + 5) / 6       // first character that starts at or after v's first bit
	last := 8 * (shift + len(v)) / 6 // characters before this end at or before v's last bit
	return s[first:last]
}
