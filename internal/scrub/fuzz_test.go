package scrub

import (
	"encoding/base64"
	"encoding/json"
	"net/url"
	"strings"
	"testing"
)

// plantedSecret is the value FuzzScrub plants in arbitrary text, in one of several encodings.
const plantedSecret = "pl4nted/S3CRET+value_xyz"

// plantedForms encodes plantedSecret independently of the code under test: each result, found in the
// output, would be a leak.
var plantedForms = func() []string {
	j, _ := json.Marshal(plantedSecret)
	jj, _ := json.Marshal(string(j))
	return []string{
		plantedSecret,
		string(j[1 : len(j)-1]),
		string(jj[1 : len(jj)-1]),
		url.QueryEscape(plantedSecret),
		url.PathEscape(plantedSecret),
		base64.StdEncoding.EncodeToString([]byte(plantedSecret)),
		base64.RawURLEncoding.EncodeToString([]byte(plantedSecret)),
	}
}()

// FuzzScrub plants a secret, in one of its encodings, at any place in arbitrary text and checks that
// scrubbing never panics, never lets the secret through (by String or by the Writer, whatever the write
// boundary), is idempotent, and leaves no JWT-shaped string behind.
func FuzzScrub(f *testing.F) {
	for _, s := range []string{
		"", "plain", testJWT, "x" + testJWT + "y", testPEM, testVault, "Bearer abc",
		"token=abc eyJa.eyJb.c", "eyJ.eyJ..", "-----BEGIN X-----eyJa.b.c", "hvs.eyJaaaaaaaaaaaaaaaaaaaaaaa.b.c",
		`{"password":"eyJx.y.z"}`, "Authorization: Basic eyJhb.c.d",
		testLegacyVault, testAWSKeyID, "postgres://u:p@h/db", `{\"token\":\"abc\"}`, `{\\\"pass\\\":\\\"x\\\"}`,
		"authority=x author: y passed=1 bypass=2 compass=3", "db_pass=x MYSQL_PWD=y dsn=z auth=w",
		"password=\"unterminated", "pl4nted/S3CRET", "<redacted>pass=x", "s.", "AKIA",
	} {
		f.Add(s, uint8(0), uint16(len(s)/2))
	}
	f.Add("bearer "+plantedSecret[:5], uint8(0), uint16(7))
	f.Add("x-bearer ", uint8(1), uint16(9))
	sc, err := New([]byte(plantedSecret))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, text string, form uint8, at uint16) {
		i := min(int(at), len(text))
		in := text[:i] + plantedForms[int(form)%len(plantedForms)] + text[i:]

		out := sc.String(in)
		for _, leak := range plantedForms {
			if strings.Contains(out, leak) {
				t.Fatalf("String(%q) = %q still contains %q", in, out, leak)
			}
		}
		if again := sc.String(out); again != out {
			t.Fatalf("String not idempotent: %q -> %q -> %q", in, out, again)
		}
		if m := jwtRE.FindString(out); m != "" {
			t.Fatalf("String(%q) = %q still contains JWT-shaped %q", in, out, m)
		}

		plain := String(text)
		if again := String(plain); again != plain {
			t.Fatalf("package String not idempotent: %q -> %q -> %q", text, plain, again)
		}
		if m := jwtRE.FindString(plain); m != "" {
			t.Fatalf("String(%q) = %q still contains JWT-shaped %q", text, plain, m)
		}

		var b strings.Builder
		w := sc.Writer(&b)
		split := min(int(at)%(len(in)+1), len(in))
		_, _ = w.Write([]byte(in[:split]))
		_, _ = w.Write([]byte(in[split:]))
		_ = w.Close()
		for _, leak := range plantedForms {
			if strings.Contains(b.String(), leak) {
				t.Fatalf("Writer(%q split at %d) = %q still contains %q", in, split, b.String(), leak)
			}
		}
	})
}
