package plandiff

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"unicode"
)

// FuzzParseAndRender: a plan is untrusted input (an agent wrote the configuration it was made from). Parse
// never panics, and whatever it accepts renders without panicking, as text whose every character is
// inert on a terminal (printable ASCII, newlines, and the ellipsis of "(… N more bytes)"), and as JSON.
func FuzzParseAndRender(f *testing.F) {
	for _, path := range []string{replaceFixture, "../toolrun/testdata/plan-create.json", "testdata/plan-incident.json", "testdata/plan-update.json"} {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, seed := range []string{
		`{"format_version":"1.2","resource_changes":[{"address":"a.w\u0435b\u001b[2J","change":{"actions":["update\u202e"],"before":{"x":[1,{"y":"\u0085"}]},"after":{"x":[2]},"after_unknown":{"x":[false,true],"z":true},"before_sensitive":{"x":[true]},"after_sensitive":true}}]}`,
		`{"format_version":"1.2","resource_changes":[{"address":"k","type":"kubernetes_service","change":{"actions":["create"],"before":null,"after":{"spec":[{"type":"NodePort","host_path":{"privileged":true}}]},"after_unknown":true,"replace_paths":[["spec",0,{"x":1}]]}}]}`,
		`{"format_version":"1","resource_changes":[{"change":{"actions":["delete","create"],"before":"scalar","after":[[[]]],"after_unknown":[[true]]}}]}`,
		`{"format_version":"1","resource_changes":[{"change":{"before":{"a":1e308},"after":{"a":-0.0},"after_unknown":{"a":{"b":true}}}}]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data)
		if err != nil {
			return
		}
		r := Diff(p)
		var text bytes.Buffer
		if err := r.WriteText(&text); err != nil {
			t.Fatal(err)
		}
		for _, c := range text.String() {
			if c != '\n' && c != '…' && (c > unicode.MaxASCII || !unicode.IsPrint(c)) {
				t.Fatalf("the screen holds %U:\n%s", c, text.String())
			}
		}
		if _, err := json.Marshal(r); err != nil {
			t.Fatal(err)
		}
		if len(r.Flags) > 0 && !strings.HasPrefix(text.String(), "!! RISK FLAGS") {
			t.Fatalf("the flags are not at the top:\n%s", text.String())
		}
	})
}
