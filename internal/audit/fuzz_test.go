package audit

import (
	"bytes"
	"path/filepath"
	"testing"
)

// FuzzVerify feeds arbitrary bytes to Verify: it must never panic, and whatever it accepts Read must
// decode completely.
func FuzzVerify(f *testing.F) {
	path := filepath.Join(f.TempDir(), "audit.jsonl")
	l := openLog(f, path, WithSync(false))
	writeChain(f, l, "req-1")
	valid := readFile(f, path)
	f.Add(valid)
	f.Add(valid[:len(valid)-1])
	f.Add(valid[:len(valid)/2])
	f.Add([]byte{})
	f.Add([]byte("\n"))
	f.Add([]byte("{}\n"))
	f.Add([]byte(`{"seq":1,"hash":"` + zeroHash + `"}` + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		sum, err := Verify(bytes.NewReader(data))
		if err != nil {
			return
		}
		recs, err := Read(bytes.NewReader(data), Filter{})
		if err != nil || len(recs) != sum.Lines {
			t.Fatalf("Verify accepted %d lines but Read got %d records, %v", sum.Lines, len(recs), err)
		}
	})
}

// FuzzScrubString checks that no JWT-shaped string survives scrubbing and that scrubbing is idempotent.
func FuzzScrubString(f *testing.F) {
	for _, s := range []string{
		"", "plain", testJWT, "x" + testJWT + "y", testPEM, testVault, "Bearer abc",
		"token=abc eyJa.eyJb.c", "eyJ.eyJ..", "-----BEGIN X-----eyJa.b.c", "hvs.eyJaaaaaaaaaaaaaaaaaaaaaaa.b.c",
		`{"password":"eyJx.y.z"}`, "Authorization: Basic eyJhb.c.d",
	} {
		f.Add(s)
	}
	jwt := defaultScrubber.jwt
	f.Fuzz(func(t *testing.T, s string) {
		out := ScrubString(s)
		if m := jwt.FindString(out); m != "" {
			t.Fatalf("ScrubString(%q) = %q still contains JWT-shaped %q", s, out, m)
		}
		if again := ScrubString(out); again != out {
			t.Fatalf("ScrubString not idempotent: %q -> %q -> %q", s, out, again)
		}
	})
}
