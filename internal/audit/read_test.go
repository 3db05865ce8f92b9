package audit

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// appendHugeLine appends a line of n bytes (and its newline) to the file at path, in chunks, so that
// writing it costs the test little memory.
func appendHugeLine(t *testing.T, path string, n int, newline bool) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := bytes.Repeat([]byte("x"), 1<<20)
	for n > 0 {
		c := chunk[:min(n, len(chunk))]
		if _, err := f.Write(c); err != nil {
			t.Fatal(err)
		}
		n -= len(c)
	}
	if newline {
		if _, err := f.Write([]byte{'\n'}); err != nil {
			t.Fatal(err)
		}
	}
}

// allocatedDuring reports how many bytes fn allocated on the heap in total: an upper bound of the heap
// it needed at its peak, whatever the garbage collector did meanwhile. It also returns the growth of
// HeapAlloc from before to after.
func allocatedDuring(fn func()) (total, growth uint64) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc, after.HeapAlloc - min(after.HeapAlloc, before.HeapAlloc)
}

// TestReadersBoundTheLine writes a 64 MiB line straight into a log (as an attacker or a broken writer
// could) and checks that verify and show report it by line number without ever holding it in memory.
func TestReadersBoundTheLine(t *testing.T) {
	const huge = 64 << 20
	for _, last := range []bool{false, true} {
		name := "followed by a line"
		if last {
			name = "last, without newline"
		}
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "audit.jsonl")
			l := openLog(t, path, WithSync(false))
			for range 3 {
				if err := l.Write(Event{RequestID: "r", Name: EventToolRequest}); err != nil {
					t.Fatal(err)
				}
			}
			appendHugeLine(t, path, huge, !last)
			if !last {
				appendBytes(t, path, []byte("{}\n"))
			}

			var sum Summary
			var verr error
			total, growth := allocatedDuring(func() { sum, verr = VerifyFile(path) })
			t.Logf("verify: allocated %d bytes in total, heap grew by %d", total, growth)
			assertTooLong(t, verr, 4)
			if sum.Lines != 3 {
				t.Errorf("verified %d lines before the long one, want 3", sum.Lines)
			}
			if total > huge/16 || growth > huge/16 {
				t.Errorf("verify allocated %d bytes (heap grew by %d) for a %d-byte line", total, growth, huge)
			}

			var recs []Record
			var rerr error
			total, growth = allocatedDuring(func() { recs, rerr = ReadFile(path, Filter{}) })
			t.Logf("show: allocated %d bytes in total, heap grew by %d", total, growth)
			assertTooLong(t, rerr, 4)
			if len(recs) != 3 {
				t.Errorf("read %d records before the long line, want 3", len(recs))
			}
			if total > huge/16 || growth > huge/16 {
				t.Errorf("read allocated %d bytes (heap grew by %d) for a %d-byte line", total, growth, huge)
			}
		})
	}
}

func assertTooLong(t *testing.T, err error, line int) {
	t.Helper()
	var verr *VerifyError
	if !errors.As(err, &verr) || verr.Line != line || !errors.Is(err, ErrLineTooLong) {
		t.Fatalf("got %v, want line %d too long", err, line)
	}
	if !strings.HasPrefix(err.Error(), "line 4: ") {
		t.Errorf("error %q does not start with the line number", err)
	}
}

// TestOpenRefusesAHugeLastLine: Open reads the last complete line to continue the chain; a huge one is
// not a line this package wrote, and is refused without being loaded.
func TestOpenRefusesAHugeLastLine(t *testing.T) {
	const huge = 64 << 20
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l := openLog(t, path, WithSync(false))
	if err := l.Write(Event{RequestID: "r", Name: EventToolRequest}); err != nil {
		t.Fatal(err)
	}
	appendHugeLine(t, path, huge, true)
	var err error
	total, _ := allocatedDuring(func() {
		var l2 *Log
		if l2, err = Open(path); err == nil {
			l2.Close()
		}
	})
	if !errors.Is(err, ErrChainBroken) {
		t.Fatalf("Open: %v, want ErrChainBroken", err)
	}
	if total > huge/16 {
		t.Errorf("Open allocated %d bytes for a %d-byte last line", total, huge)
	}
}

// TestReadersAcceptTheWriteBound: the longest line Write produces reads back.
func TestReadersAcceptTheWriteBound(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l := openLog(t, path, WithSync(false))
	fields := map[string]any{}
	for i := range 60 { // just under MaxLineBytes once encoded
		fields[strings.Repeat("k", 3)+string(rune('A'+i))] = strings.Repeat("v", MaxStringBytes)
	}
	if err := l.Write(Event{RequestID: "r", Name: EventToolRequest, Fields: fields}); err != nil {
		t.Fatal(err)
	}
	if n := len(readLines(t, path)[0]); n < MaxLineBytes*9/10 {
		t.Fatalf("line is only %d bytes; the test wants one near %d", n, MaxLineBytes)
	}
	mustVerify(t, path, 1)
	if recs := readAll(t, path); len(recs[0].Fields) != len(fields) {
		t.Fatalf("read %d fields, want %d", len(recs[0].Fields), len(fields))
	}
}
