package scrub

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/url"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"testing/iotest"
)

// issuedToken stands for the credential a sandbox was issued. It has no shape a pattern knows, so only
// exact scrubbing can find it, and it has characters that JSON, URL and base64 encode differently.
const issuedToken = `k8s-Tok"en/with+odd\chars&=?99`

func mustNew(t testing.TB, secrets ...string) *Scrubber {
	t.Helper()
	bs := make([][]byte, len(secrets))
	for i, s := range secrets {
		bs[i] = []byte(s)
	}
	s, err := New(bs...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

func TestNewRefuses(t *testing.T) {
	tests := []struct {
		name   string
		secret string
		want   error
	}{
		{"empty", "", ErrShortSecret},
		{"seven bytes", "1234567", ErrShortSecret},
		{"newline", "abcdefgh\nijk", ErrUnscrubbableSecret},
		{"carriage return", "abcdefgh\rijk", ErrUnscrubbableSecret},
		{"less than", "abcd<efgh", ErrUnscrubbableSecret},
		{"greater than", "abcd>efgh", ErrUnscrubbableSecret},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if s, err := New([]byte("a-valid-secret"), []byte(tt.secret)); !errors.Is(err, tt.want) || s != nil {
				t.Fatalf("New(%q) = %v, %v; want %v", tt.secret, s, err, tt.want)
			}
		})
	}
	if _, err := New([]byte("12345678")); err != nil {
		t.Fatalf("New with an 8-byte secret: %v", err)
	}
}

func TestExact(t *testing.T) {
	s := mustNew(t, issuedToken)
	jsonOnce, _ := json.Marshal(issuedToken)
	jsonTwice, _ := json.Marshal(string(jsonOnce))
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"raw", "token is " + issuedToken + ".", "token is <redacted:secret>."},
		{"twice", issuedToken + issuedToken, "<redacted:secret><redacted:secret>"},
		{"json escaped", `{"out":` + string(jsonOnce) + `}`, `{"out":"<redacted:secret>"}`},
		{"json escaped twice", `{"out":` + string(jsonTwice) + `}`, `{"out":"\"<redacted:secret>\""}`},
		{"json escaped with html escaping", `{"out":"` + strings.ReplaceAll(jsonEscape(issuedToken, false), "&", `\u0026`) + `"}`, `{"out":"<redacted:secret>"}`},
		{"base64", "data: " + base64.StdEncoding.EncodeToString([]byte(issuedToken)), "data: <redacted:secret>"},
		{"base64 raw url", "data: " + base64.RawURLEncoding.EncodeToString([]byte(issuedToken)), "data: <redacted:secret>"},
		{"query escaped", "GET /x?t=" + url.QueryEscape(issuedToken) + " 200", "GET /x?t=<redacted:secret> 200"},
		{"path escaped", "GET /x/" + url.PathEscape(issuedToken) + " 200", "GET /x/<redacted:secret> 200"},
		{"lower-case hex", "t=" + regexp.MustCompile(`%[0-9A-F]{2}`).ReplaceAllStringFunc(url.QueryEscape(issuedToken), strings.ToLower), "t=<redacted:secret>"},
		{"other text kept", "nothing here", "nothing here"},
		{"patterns still apply", "x " + testVault, "x <redacted:vault-token>"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := s.String(tt.in)
			if strings.HasPrefix(tt.name, "base64") {
				// The one character at each end that mixes in padding or neighbours may stay.
				if strings.Contains(got, issuedToken) || !strings.Contains(got, redactedSecret) {
					t.Fatalf("String(%q) = %q", tt.in, got)
				}
			} else if got != tt.want {
				t.Errorf("String(%q)\n got %q\nwant %q", tt.in, got, tt.want)
			}
			if again := s.String(got); again != got {
				t.Errorf("not idempotent: %q -> %q", got, again)
			}
			if b := s.Bytes([]byte(tt.in)); string(b) != got {
				t.Errorf("Bytes = %q, String = %q", b, got)
			}
		})
	}
}

// TestExactBase64InsideBlob puts the token at every offset of a larger base64 blob (a kubeconfig in a
// Secret's data, say) and checks that every character encoding only the token's bits is gone: at most
// the one character at each end that mixes in a neighbour's bits is left.
func TestExactBase64InsideBlob(t *testing.T) {
	s := mustNew(t, issuedToken)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding} {
		for p := range 6 {
			plain := strings.Repeat("p", p) + issuedToken + "-suffix"
			blob := enc.EncodeToString([]byte(plain))
			got := s.String(blob)
			i := strings.Index(got, redactedSecret)
			if i < 0 {
				t.Fatalf("prefix %d: %q not scrubbed: %q", p, blob, got)
			}
			kept, after := got[:i], got[i+len(redactedSecret):]
			startPure := (8*p + 5) / 6                // first character with only token bits
			endPure := 8 * (p + len(issuedToken)) / 6 // end of the characters with only token bits
			if !strings.HasPrefix(blob, kept) || len(kept) > startPure {
				t.Errorf("prefix %d: kept %q before the marker, want at most %q", p, kept, blob[:startPure])
			}
			if !strings.HasSuffix(blob, after) || len(blob)-len(after) < endPure {
				t.Errorf("prefix %d: kept %q after the marker, want at most %q", p, after, blob[endPure:])
			}
		}
	}
}

func TestExactValue(t *testing.T) {
	s := mustNew(t, issuedToken, "0123456789")
	in := map[string]any{
		"output":        "applied with " + issuedToken,
		issuedToken:     "in a key",
		"list":          []any{[]byte(issuedToken), json.Number("90123456789")},
		"note":          errors.New("login failed: " + issuedToken),
		"count":         json.Number("42"),
		"authorization": "Bearer " + issuedToken,
	}
	got := s.Value(in)
	want := map[string]any{
		"output":            "applied with <redacted:secret>",
		"<redacted:secret>": "in a key",
		"list":              []any{"<redacted:secret>", "9<redacted:secret>"},
		"note":              "login failed: <redacted:secret>",
		"count":             json.Number("42"),
		"authorization":     "<redacted>",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Value\n got %#v\nwant %#v", got, want)
	}
}

func TestExactLongestFormFirst(t *testing.T) {
	// The raw secret is a substring of neither encoding here, but a shorter secret can be a substring of a
	// longer one: the longer is replaced whole.
	s := mustNew(t, "abcdefgh", "abcdefghijkl")
	if got := s.String("x abcdefghijkl y abcdefgh z"); got != "x <redacted:secret> y <redacted:secret> z" {
		t.Fatalf("got %q", got)
	}
}

// HoldsIn finds a value and its encodings wherever the reader's pieces cut them, and only those.
func TestHoldsIn(t *testing.T) {
	secret := "tok-3f9a8b7c6d5e4f3a2b1c"
	s, err := New([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	for _, at := range []int{0, 1, holdsChunk - 10, holdsChunk - 1, holdsChunk, 3*holdsChunk + 7} {
		for _, form := range []string{secret, base64.StdEncoding.EncodeToString([]byte(secret))} {
			data := append(bytes.Repeat([]byte{0}, at), form...)
			data = append(data, bytes.Repeat([]byte{1}, 100)...)
			got, err := s.HoldsIn(iotest.OneByteReader(bytes.NewReader(data)))
			if err != nil || !got {
				t.Errorf("value %q at %d byte by byte: %v, %v", form[:6], at, got, err)
			}
			got, err = s.HoldsIn(bytes.NewReader(data))
			if err != nil || !got {
				t.Errorf("value %q at %d: %v, %v", form[:6], at, got, err)
			}
		}
	}
	if got, err := s.HoldsIn(bytes.NewReader(bytes.Repeat([]byte("tok-3f9a8b7c"), 20000))); got || err != nil {
		t.Errorf("a prefix of the value was found: %v, %v", got, err)
	}
	var none *Scrubber
	if got, err := none.HoldsIn(strings.NewReader(secret)); got || err != nil {
		t.Errorf("nil Scrubber: %v, %v", got, err)
	}
}
