package tfcheck

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
)

// CheckDir reads a flat workspace folder (the runner's /workspace ConfigMap volume) and checks it
// with Check; it returns the files it checked, which are the files to copy, so that nothing is
// read twice (a file changed between the check and the copy would escape the check).
//
// Entries whose names start with ".." are the kubelet's own bookkeeping in a ConfigMap volume
// (..data and a timestamped folder that the key files link into); ConfigMap keys cannot start with
// "..", so they are never workspace files and are passed over. Every other entry must be a
// workspace file: a regular file, or a link to one that stays inside dir, of at most MaxFileSize
// bytes, named with [A-Za-z0-9._-]. Subfolders, links leading outside, devices, pipes and sockets
// are refused.
func CheckDir(dir string, opts Options) (map[string][]byte, error) {
	return checkDir(dir, opts, func(name string, _ fs.DirEntry) bool { return !strings.HasPrefix(name, "..") })
}

// ReadWorkspace reads the workspace files of a folder that a person keeps -- the MCP server's workspace
// folders, which may also hold a README, a .terraform folder or a state file -- and checks them exactly as
// CheckDir does. The entries it takes are the ones Terraform would read (IsTerraformFile); every other
// entry is passed over. Files Terraform reads but the allowlist refuses (override files, odd names) are
// taken and refused, not passed over, so the server never publishes a workspace that means something
// different from the folder. The files it returns are what CheckDir sees in the sandbox: one filter for the
// server and the runner.
func ReadWorkspace(dir string, opts Options) (map[string][]byte, error) {
	return checkDir(dir, opts, func(name string, e fs.DirEntry) bool { return IsTerraformFile(name) && !e.IsDir() })
}

// IsTerraformFile reports whether Terraform would read a file of this name from a workspace folder:
// configuration (*.tf, *.tf.json, overrides included), variables (*.tfvars, *.tfvars.json) and the
// dependency lock file. IsWorkspaceFile says which of them the allowlist admits.
func IsTerraformFile(name string) bool { return fileKindOf(name) != kindNone }

// checkDir reads the entries of dir that take admits, then checks them with Check.
func checkDir(dir string, opts Options, take func(name string, e fs.DirEntry) bool) (map[string][]byte, error) {
	c, err := newChecker(opts)
	if err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("workspace %s: %w", dir, err)
	}
	defer root.Close()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read workspace %s: %w", dir, err)
	}
	files := map[string][]byte{}
	total := 0
	for _, e := range entries {
		name := e.Name()
		if !take(name, e) {
			continue
		}
		c.file = name
		if !fileNameRE.MatchString(name) && name != lockFileName || strings.Contains(name, "..") {
			c.refuseFile("file name: use only letters, digits, '.', '-' and '_' (and no \"..\")")
			continue
		}
		if len(files) >= MaxFiles {
			c.refuseFile("more than %d files in the workspace", MaxFiles)
			break
		}
		data, err := readEntry(root, name, e.Type())
		if err != nil {
			c.refuseFile("%v", err)
			continue
		}
		total += len(data)
		if total > MaxTotalSize {
			c.refuseFile("the files add up to more than %d bytes", MaxTotalSize)
			break
		}
		files[name] = data
	}
	c.file = ""
	if len(c.problems) > 0 {
		return nil, c.result()
	}
	c.checkFiles(files)
	if err := c.result(); err != nil {
		return nil, err
	}
	return files, nil
}

// errNotRegular marks a workspace entry that is not a regular file.
var errNotRegular = errors.New("not a regular file")

// readEntry reads one entry through root, which refuses links that lead outside it.
func readEntry(root *os.Root, name string, typ fs.FileMode) ([]byte, error) {
	switch {
	case typ.IsDir():
		return nil, fmt.Errorf("%w: a folder; a workspace is one flat folder (no modules in subfolders)", errNotRegular)
	case typ&^fs.ModeSymlink != 0:
		return nil, fmt.Errorf("%w (%s): a workspace is one flat folder of files", errNotRegular, typ.Type())
	}
	// Stat (through the link) before opening: opening a named pipe would block.
	fi, err := root.Stat(name)
	if err != nil {
		// os.Root refuses a link that leads out of the folder; say so plainly.
		return nil, fmt.Errorf("cannot open inside the workspace folder (a link leading outside?): %w", err)
	}
	if !fi.Mode().IsRegular() {
		what := "not a regular file"
		if fi.IsDir() {
			what = "a folder; a workspace is one flat folder (no modules in subfolders)"
		}
		return nil, fmt.Errorf("%w: %s", errNotRegular, what)
	}
	f, err := root.Open(name)
	if err != nil {
		return nil, fmt.Errorf("cannot open inside the workspace folder: %w", err)
	}
	defer f.Close()
	if ofi, err := f.Stat(); err != nil || !os.SameFile(fi, ofi) {
		return nil, fmt.Errorf("changed while it was read")
	}
	if fi.Size() > MaxFileSize {
		return nil, fmt.Errorf("%d bytes: a file holds at most %d", fi.Size(), MaxFileSize)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("more than %d bytes", MaxFileSize)
	}
	return data, nil
}
