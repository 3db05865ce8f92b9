package cpu

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"syscall"
	"time"
)

// AcctRecordSize is the size of one struct acct_v3 record (include/uapi/linux/acct.h).
const AcctRecordSize = 64

// acctTick is AHZ, the unit of a v3 record's times: 100 per second whatever the kernel's HZ.
const acctTick = 10 * time.Millisecond

// Acct is one process-accounting record: a process that exited.
type Acct struct {
	PID, PPID int
	Comm      string
	// Begin is when the process started (whole seconds), End when it exited (Begin plus the elapsed time).
	Begin, End time.Time
	// CPU is the user+system time of the process itself (all its threads, not its children). The kernel
	// rounds each of the two down to 10 ms, so a process that used 7 ms records 0.
	CPU time.Duration
}

// ParseAcct decodes a file of v3 records, as the kernel writes them (native byte order, little-endian on
// the machines this project runs on). A trailing partial record is an error: the kernel writes whole records.
func ParseAcct(data []byte) ([]Acct, error) {
	if len(data)%AcctRecordSize != 0 {
		return nil, fmt.Errorf("process accounting file of %d bytes is not a whole number of %d-byte records", len(data), AcctRecordSize)
	}
	out := make([]Acct, 0, len(data)/AcctRecordSize)
	for off := 0; off < len(data); off += AcctRecordSize {
		r := data[off : off+AcctRecordSize]
		if r[1] != 3 {
			return nil, fmt.Errorf("process accounting record at byte %d has version %d, want 3 (CONFIG_BSD_PROCESS_ACCT_V3)", off, r[1])
		}
		le := binary.LittleEndian
		begin := time.Unix(int64(le.Uint32(r[24:])), 0)
		elapsed := time.Duration(float64(math.Float32frombits(le.Uint32(r[28:]))) * float64(acctTick))
		comm := r[48:64]
		if i := bytes.IndexByte(comm, 0); i >= 0 {
			comm = comm[:i]
		}
		out = append(out, Acct{
			PID: int(le.Uint32(r[16:])), PPID: int(le.Uint32(r[20:])), Comm: string(comm),
			Begin: begin, End: begin.Add(elapsed),
			CPU: (compT(le.Uint16(r[32:])) + compT(le.Uint16(r[34:]))) * acctTick,
		})
	}
	return out, nil
}

// compT decodes a comp_t: a 13-bit mantissa and a 3-bit base-8 exponent.
func compT(c uint16) time.Duration {
	return time.Duration(uint64(c&0x1fff) << (3 * uint(c>>13)))
}

// StartAccounting turns on process accounting into file (created or appended to). The kernel has one
// accounting file per PID namespace; this replaces any other, so callers turn it off when done.
func StartAccounting(file string) error {
	if err := syscall.Acct(file); err != nil {
		return fmt.Errorf("acct(%s): %w (process accounting needs root and CONFIG_BSD_PROCESS_ACCT)", file, err)
	}
	return nil
}

// StopAccounting turns process accounting off (acct(NULL)).
func StopAccounting() error {
	if _, _, e := syscall.Syscall(syscall.SYS_ACCT, 0, 0, 0); e != 0 {
		return fmt.Errorf("acct(NULL): %w", e)
	}
	return nil
}
