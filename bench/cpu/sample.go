package cpu

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// Proc is one live process as a sample saw it.
type Proc struct {
	Stat
	// Begin is when the process started (boot time plus Stat.Start).
	Begin time.Time
	// InPod: the process is in a kubelet Pod cgroup, so its CPU is counted with its Pod's cgroup.
	InPod bool
}

// Host is one sample of the host: every live process, the Pod cgroups' CPU counters and how far the
// process-accounting file had been written.
type Host struct {
	At       time.Time
	Procs    map[int]Proc
	Kubepods time.Duration
	Pods     map[string]time.Duration
	// AcctRecords is how many accounting records the file held: the records after it are the processes
	// that exited after this sample.
	AcctRecords int
}

// Sampler takes Host samples.
type Sampler struct {
	Proc     string // normally /proc
	Cgroups  *Cgroups
	AcctFile string
	boot     time.Time
}

// NewSampler finds the Pod cgroups under cgroupRoot and reads the boot time from procRoot.
func NewSampler(procRoot, cgroupRoot, acctFile string) (*Sampler, error) {
	cg, err := FindCgroups(cgroupRoot)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(procRoot, "stat"))
	if err != nil {
		return nil, err
	}
	bt, err := ParseBootTime(string(b))
	if err != nil {
		return nil, err
	}
	return &Sampler{Proc: procRoot, Cgroups: cg, AcctFile: acctFile, boot: time.Unix(bt, 0)}, nil
}

// Sample reads the host now. Processes that exit while it reads are skipped (process accounting has them).
func (s *Sampler) Sample() (*Host, error) {
	h := &Host{At: time.Now(), Procs: map[int]Proc{}}
	var err error
	if h.Kubepods, err = s.Cgroups.Usage(s.Cgroups.Kubepods); err != nil {
		return nil, err
	}
	if h.Pods, err = s.Cgroups.Pods(); err != nil {
		return nil, err
	}
	if fi, err := os.Stat(s.AcctFile); err == nil {
		h.AcctRecords = int(fi.Size() / AcctRecordSize)
	}
	ents, err := os.ReadDir(s.Proc)
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(s.Proc, e.Name(), "stat"))
		if err != nil {
			continue
		}
		st, err := ParseStat(string(b))
		if err != nil {
			return nil, err
		}
		cg, _ := os.ReadFile(filepath.Join(s.Proc, e.Name(), "cgroup"))
		h.Procs[pid] = Proc{
			Stat:  st,
			Begin: s.boot.Add(time.Duration(st.Start) * ClockTick),
			InPod: PodUID(CPUCgroup(string(cg))) != "",
		}
	}
	return h, nil
}

// Records reads the accounting records from the first-th on.
func (s *Sampler) Records(first int) ([]Acct, error) {
	f, err := os.Open(s.AcctFile)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(int64(first)*AcctRecordSize, io.SeekStart); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	b = b[:len(b)/AcctRecordSize*AcctRecordSize] // a record being written right now is read next time
	recs, err := ParseAcct(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.AcctFile, err)
	}
	return recs, nil
}
