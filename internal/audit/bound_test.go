package audit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestWriteBoundsAHugeArgument is the call of the reliability review: a 16 MiB namespace argument was
// written whole into the audit log before the policy refused it.
func TestWriteBoundsAHugeArgument(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l := openLog(t, path)
	huge := strings.Repeat("n", 16<<20)
	err := l.Write(Event{RequestID: "req-1", Name: EventToolRequest, Tool: "k8s_get_pod_status",
		Fields: map[string]any{"params": map[string]any{"namespace": huge, "label_selector": "app=web"}}})
	if err != nil {
		t.Fatal(err)
	}
	lines := readLines(t, path)
	if n := len(lines[0]); n > MaxLineBytes {
		t.Fatalf("line is %d bytes, over the bound of %d", n, MaxLineBytes)
	}
	recs := readAll(t, path)
	params := recs[0].Fields["params"].(map[string]any)
	want := map[string]any{"truncated": true, "bytes": float64(len(huge)), "sha256": sha(huge)}
	if got := params["namespace"]; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("namespace recorded as %v, want %v", got, want)
	}
	if params["label_selector"] != "app=web" {
		t.Errorf("short argument changed: %v", params["label_selector"])
	}
	mustVerify(t, path, 1)
}

type bigStruct struct {
	Output string `json:"output"`
	Note   string `json:"note"`
}

type bigError struct{ msg string }

func (e bigError) Error() string { return e.msg }

func TestBoundValues(t *testing.T) {
	long := strings.Repeat("x", MaxStringBytes+1)
	atLimit := strings.Repeat("y", MaxStringBytes)
	sum := truncated(len(long), sha(long))
	tests := []struct {
		name string
		in   any
		want any
	}{
		{"string at the limit is kept", atLimit, atLimit},
		{"longer string", long, sum},
		{"bytes", []byte(long), sum},
		{"json number", json.Number(strings.Repeat("9", MaxStringBytes+1)), truncated(MaxStringBytes+1, sha(strings.Repeat("9", MaxStringBytes+1)))},
		{"error message", bigError{long}, sum},
		{"struct field", bigStruct{Output: long, Note: "n"}, map[string]any{"output": sum, "note": "n"}},
		{"pointer in a typed map", map[string]*string{"a": &long}, map[string]any{"a": sum}},
		{"slice", []string{"s", long}, []any{"s", sum}},
		{"numbers and bools", []any{1, 2.5, true, nil}, []any{1, 2.5, true, nil}},
		{"long key", map[string]any{long: "hunter2", "ok": 1}, map[string]any{"<truncated-key:1025-bytes:sha256:" + sha(long) + ">": "<redacted>", "ok": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := bound(tt.in, 0); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("bound\n got %#v\nwant %#v", got, tt.want)
			}
		})
	}
}

func TestWriteBoundsTheLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l := openLog(t, path)
	// Many fields, each under MaxStringBytes, together far over MaxLineBytes; and over-long header
	// strings.
	fields := map[string]any{}
	for i := range 200 {
		fields[fmt.Sprintf("f%03d", i)] = strings.Repeat("\x01", MaxStringBytes) // JSON escapes each as \u0001
	}
	longID := strings.Repeat("r", 5000)
	if err := l.Write(Event{RequestID: longID, Name: strings.Repeat("e", 5000), Tool: strings.Repeat("\x02", MaxStringBytes), Fields: fields}); err != nil {
		t.Fatal(err)
	}
	lines := readLines(t, path)
	if n := len(lines[0]); n > MaxLineBytes {
		t.Fatalf("line is %d bytes, over %d", n, MaxLineBytes)
	}
	rec := readAll(t, path)[0]
	if rec.Fields[FieldTruncated] != true || rec.Fields[FieldTruncatedBytes].(float64) < MaxLineBytes || len(rec.Fields[FieldTruncatedSHA256].(string)) != 64 {
		t.Errorf("fields recorded as %v, want the truncated summary", rec.Fields)
	}
	if want := "<truncated:5000-bytes:sha256:" + sha(longID) + ">"; rec.RequestID != want {
		t.Errorf("request ID %q, want %q", rec.RequestID, want)
	}
	mustVerify(t, path, 1)
}

func TestBoundBeforeScrubbingKeepsSecretsOut(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l := openLog(t, path)
	long := strings.Repeat("output ", MaxStringBytes/7) + "Bearer " + testJWT
	if err := l.Write(Event{RequestID: "r", Name: EventToolResult, Fields: map[string]any{"out": long, "password": "hunter2"}}); err != nil {
		t.Fatal(err)
	}
	got := readFile(t, path)
	for _, secret := range []string{testJWT, "eyJ", "hunter2"} {
		if bytes.Contains(got, []byte(secret)) {
			t.Errorf("file contains %q", secret)
		}
	}
}
