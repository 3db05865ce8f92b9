package scrub

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net/url"
	"strings"
	"testing"
)

// terraformOutput is output in which a tool running with the issued token prints it in every form
// exact scrubbing knows, among ordinary lines, pattern secrets and a PEM block.
func terraformOutput() string {
	jsonForm, _ := json.Marshal(issuedToken)
	return strings.Join([]string{
		"Initializing the backend...",
		"kubernetes_deployment.web: Creating...",
		"debug: got " + issuedToken,
		"debug: header " + issuedToken + " and again " + issuedToken,
		`{"@message":"request","echo":` + string(jsonForm) + `}`,
		"blob: " + base64.StdEncoding.EncodeToString([]byte("users:\n- user:\n    token: "+issuedToken+"\n")),
		"url: https://api/x?t=" + url.QueryEscape(issuedToken),
		"vault: " + testVault,
		"key:",
		testPEM,
		"Apply complete! Resources: 1 added, 0 changed, 0 destroyed.",
		"",
	}, "\n")
}

func writeInChunks(t *testing.T, s *Scrubber, in string, splits []int) string {
	t.Helper()
	var out bytes.Buffer
	w := s.Writer(&out)
	last := 0
	for _, at := range splits {
		if n, err := w.Write([]byte(in[last:at])); err != nil || n != at-last {
			t.Fatalf("Write: %d, %v", n, err)
		}
		last = at
	}
	if _, err := w.Write([]byte(in[last:])); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

func TestWriterMatchesString(t *testing.T) {
	s := mustNew(t, issuedToken)
	in := terraformOutput()
	got := writeInChunks(t, s, in, nil)
	if want := s.String(in); got != want {
		t.Errorf("Writer output differs from String\n got %q\nwant %q", got, want)
	}
	if !strings.Contains(got, "Apply complete!") || !strings.Contains(got, "key:\n<redacted:pem>\nApply") {
		t.Errorf("ordinary lines lost or PEM not collapsed: %q", got)
	}
}

func TestWriterSecretSplitAcrossWrites(t *testing.T) {
	s := mustNew(t, issuedToken)
	in := "before " + issuedToken + " after\n"
	at := strings.Index(in, issuedToken) + len(issuedToken)/2
	got := writeInChunks(t, s, in, []int{at})
	if got != "before <redacted:secret> after\n" {
		t.Fatalf("got %q", got)
	}
}

// TestWriterNeverPassesASecret writes the same output with random write boundaries, including one byte
// at a time, and checks that the result never depends on them and never holds the token in any form.
func TestWriterNeverPassesASecret(t *testing.T) {
	s := mustNew(t, issuedToken)
	in := terraformOutput()
	want := writeInChunks(t, s, in, nil)
	forbidden := append(encodings(issuedToken), "MIIBOgIBAAJBAKj34", "CAESIJ0aB1cD2eF3gH4iJ5kL6mN7oP8qR9sT")
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 300 {
		var splits []int
		switch round {
		case 0:
			for i := 1; i < len(in); i++ {
				splits = append(splits, i)
			}
		default:
			for i := 0; i < len(in); i += 1 + rng.IntN(40) {
				splits = append(splits, i)
			}
		}
		got := writeInChunks(t, s, in, splits)
		if got != want {
			t.Fatalf("round %d: output depends on write boundaries %v\n got %q\nwant %q", round, splits, got, want)
		}
		for _, f := range forbidden {
			if strings.Contains(got, f) {
				t.Fatalf("round %d: output contains %q: %q", round, f, got)
			}
		}
	}
}

func TestWriterLongLine(t *testing.T) {
	s := mustNew(t, issuedToken)
	// The token straddles the cut at MaxLineBytes; a short line follows.
	head := strings.Repeat("a ", (MaxLineBytes-10)/2)
	long := head + issuedToken + strings.Repeat("b", 3*MaxLineBytes)
	var out bytes.Buffer
	w := s.Writer(&out)
	for i := 0; i < len(long); i += 64 << 10 {
		if _, err := w.Write([]byte(long[i:min(i+64<<10, len(long))])); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := io.WriteString(w, "\nnext line\n"); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out.String(), "\n")
	if len(lines) != 3 || lines[1] != "next line" || lines[2] != "" {
		t.Fatalf("want the cut line, the next line and nothing else; got %d lines", len(lines))
	}
	if !strings.HasSuffix(lines[0], cutMarker) || len(lines[0]) > MaxLineBytes+len(cutMarker) {
		t.Errorf("cut line: %d bytes, ends %q", len(lines[0]), lines[0][max(0, len(lines[0])-80):])
	}
	kept := strings.TrimSuffix(lines[0], cutMarker)
	for k := 3; k <= len(issuedToken); k++ {
		if strings.HasSuffix(kept, issuedToken[:k]) {
			t.Errorf("the cut line ends with the first %d bytes of the token", k)
		}
	}
}

func TestWriterBufferIsBounded(t *testing.T) {
	w := (*Scrubber)(nil).Writer(io.Discard).(*lineWriter)
	chunk := bytes.Repeat([]byte("x"), 256<<10)
	for range 32 { // 8 MiB without a newline
		if _, err := w.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if cap(w.line) > 2*MaxLineBytes {
		t.Fatalf("line buffer grew to %d bytes", cap(w.line))
	}
}

func TestWriterPEMAcrossWrites(t *testing.T) {
	in := "a\n" + testPEM + " tail\nb\n-----BEGIN CERTIFICATE-----\nMIIB\nnever ends"
	got := writeInChunks(t, nil, in, []int{5, 40, 41, 90})
	if want := "a\n<redacted:pem>\n tail\nb\n<redacted:pem>\n"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestWriterLastLineWithoutNewline(t *testing.T) {
	if got := writeInChunks(t, nil, "one\npassword=x", nil); got != "one\npassword=<redacted>" {
		t.Fatalf("got %q", got)
	}
}

type failingWriter struct{ n int }

var errSink = errors.New("sink failed")

func (f *failingWriter) Write(p []byte) (int, error) {
	if f.n == 0 {
		return 0, errSink
	}
	f.n--
	return len(p), nil
}

func TestWriterErrors(t *testing.T) {
	w := (*Scrubber)(nil).Writer(&failingWriter{n: 1})
	if _, err := io.WriteString(w, "one\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(w, "two\n"); !errors.Is(err, errSink) {
		t.Fatalf("Write: %v, want the sink's error", err)
	}
	if _, err := io.WriteString(w, "three\n"); !errors.Is(err, errSink) {
		t.Fatalf("Write after a failure: %v, want the sink's error", err)
	}
	if err := w.Close(); !errors.Is(err, errSink) {
		t.Fatalf("Close: %v, want the sink's error", err)
	}

	w = (*Scrubber)(nil).Writer(io.Discard)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(w, "x"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Write after Close: %v, want ErrClosed", err)
	}
}
