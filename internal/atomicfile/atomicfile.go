// Package atomicfile writes a file so that a reader sees the old content or the whole new one, never a part.
//
// Trust role: none of its own. It is a leaf used by trusted and untrusted code alike (the webhook's serving
// certificates, the approver's private key, kubeconfigs, the credential agent's done marker, release
// artifacts) and imports nothing of ours, so that importing it pulls nothing in.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// Owner is the uid and gid a file is given (root writing a file for another user).
type Owner struct{ UID, GID int }

// Option changes what Write does.
type Option func(*options)

type options struct{ owner *Owner }

// WithOwner gives the file to owner before any byte is written; nil keeps the writer as owner.
func WithOwner(owner *Owner) Option { return func(o *options) { o.owner = owner } }

// Write writes data to path: a temporary file in the same folder (so that the rename stays on one file
// system), given mode perm exactly (not filtered by the umask) and its owner before any byte is written,
// synced, closed, then renamed over path. On any error the temporary file is removed and path is left as it
// was. The folder must exist. Errors read "write PATH: ...".
func Write(path string, data []byte, perm os.FileMode, opts ...Option) (err error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if err = f.Chmod(perm); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if o.owner != nil {
		if err = f.Chown(o.owner.UID, o.owner.GID); err != nil {
			return fmt.Errorf("write %s: give it to uid %d: %w", path, o.owner.UID, err)
		}
	}
	if _, err = f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
