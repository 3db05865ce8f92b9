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
	f.Add([]byte("5\n[1,{}]\n"))
	f.Add([]byte(`{"seq":1,"fields":{"a":[{"b":1,"b":2}],"c":{}},"Seq":2}` + "\n"))
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
