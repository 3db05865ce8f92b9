// Package instance tells whether an MCP server process that wrote to an audit log is still running. Each
// server holds an exclusive flock(2) on its own file, <dir>/<id>.lock, for as long as it lives; the kernel
// releases the lock when the process ends, however it ends (SIGKILL, OOM, a crash), so "can I take the
// lock?" answers "is it dead?" without PIDs that the system may reuse.
package instance

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	"golang.org/x/sys/unix"
)

// Instance is this process's liveness mark.
type Instance struct {
	ID  string
	dir string
	f   *os.File
}

var idPattern = regexp.MustCompile(`^srv-[0-9a-f]{16}$`)

// Start creates and locks a new instance file in dir.
func Start(dir string) (*Instance, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	id := "srv-" + hex.EncodeToString(b)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("instance directory: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, id+".lock"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("instance lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock instance file: %w", err)
	}
	return &Instance{ID: id, dir: dir, f: f}, nil
}

// Close releases the lock and removes the file: a server that ends normally leaves nothing to recover.
func (i *Instance) Close() error {
	if i == nil || i.f == nil {
		return nil
	}
	err := os.Remove(i.f.Name())
	return errors.Join(err, i.f.Close())
}

// Alive reports whether the instance id (written by Start in dir) still runs. An id that is not of the
// form Start makes, or whose file is gone, is reported dead only when its file is gone: a malformed id is
// never taken for a dead server, so its calls are left alone.
func Alive(dir, id string) bool {
	if !idPattern.MatchString(id) {
		return true
	}
	f, err := os.OpenFile(filepath.Join(dir, id+".lock"), os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return false
	}
	if err != nil {
		return true
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return true
	}
	// Taken: its owner is gone. Remove the file while holding the lock, so the next look says "gone".
	_ = os.Remove(f.Name())
	_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return false
}
