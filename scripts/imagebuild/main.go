// Command imagebuild writes a single-layer container image as a docker-archive tarball, without a
// container engine, so that the local cluster's images can be built on a machine with no Docker and no
// registry and imported with `ctr images import`.
//
//	imagebuild -name localhost/pause:dev -out pause.tar -file /pause=./pause:0755 -entrypoint /pause -user 65535:65535
//
// -file DEST=SRC[:MODE] copies a file (repeatable), -dir DEST=SRC copies a tree, -symlink DEST=TARGET adds a
// symlink, -busybox SRC installs a static busybox with one symlink per applet, -passwd adds /etc/passwd and
// /etc/group with root and the given non-root user.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/agent-sandbox/agent-sandbox/scripts/imagelayer"
)

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

type options struct {
	name, out, entrypoint, user, workdir, busybox, passwd string
	files, dirs, symlinks, env, mkdirs                    multi
}

func main() {
	var o options
	flag.StringVar(&o.name, "name", "", "image reference, e.g. localhost/agent-sandbox:dev")
	flag.StringVar(&o.out, "out", "", "output docker-archive tarball")
	flag.StringVar(&o.entrypoint, "entrypoint", "", "entrypoint, space-separated")
	flag.StringVar(&o.user, "user", "", "user the image runs as, UID:GID")
	flag.StringVar(&o.workdir, "workdir", "", "working directory")
	flag.StringVar(&o.busybox, "busybox", "", "path of a static busybox to install in /bin with its applets")
	flag.StringVar(&o.passwd, "passwd", "", "NAME:UID:GID of a non-root user to add to /etc/passwd and /etc/group")
	flag.Var(&o.files, "file", "DEST=SRC[:MODE] file to add (repeatable)")
	flag.Var(&o.dirs, "dir", "DEST=SRC directory tree to add (repeatable)")
	flag.Var(&o.symlinks, "symlink", "DEST=TARGET symlink to add (repeatable)")
	flag.Var(&o.mkdirs, "mkdir", "DEST[:MODE] empty directory to add (repeatable)")
	flag.Var(&o.env, "env", "KEY=VALUE environment variable (repeatable)")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintf(os.Stderr, "imagebuild: %v\n", err)
		os.Exit(1)
	}
}

func run(o options) error {
	if o.name == "" || o.out == "" {
		return errors.New("-name and -out are required")
	}
	ref, err := name.ParseReference(o.name)
	if err != nil {
		return fmt.Errorf("image name: %w", err)
	}
	tree := imagelayer.NewTree()
	for _, f := range o.files {
		dest, src, ok := strings.Cut(f, "=")
		if !ok {
			return fmt.Errorf("-file %q: want DEST=SRC[:MODE]", f)
		}
		mode := int64(0o644)
		if i := strings.LastIndex(src, ":"); i > 0 {
			m, err := strconv.ParseInt(src[i+1:], 8, 32)
			if err != nil {
				return fmt.Errorf("-file %q: mode: %w", f, err)
			}
			mode, src = m, src[:i]
		}
		if err := tree.CopyFile(dest, src, mode); err != nil {
			return err
		}
	}
	for _, d := range o.dirs {
		dest, src, ok := strings.Cut(d, "=")
		if !ok {
			return fmt.Errorf("-dir %q: want DEST=SRC", d)
		}
		if err := tree.CopyTree(dest, src, imagelayer.Permissions); err != nil {
			return fmt.Errorf("-dir %q: %w", d, err)
		}
	}
	for _, s := range o.symlinks {
		dest, target, ok := strings.Cut(s, "=")
		if !ok {
			return fmt.Errorf("-symlink %q: want DEST=TARGET", s)
		}
		tree.AddSymlink(dest, target)
	}
	for _, d := range o.mkdirs {
		dest, m, _ := strings.Cut(d, ":")
		mode := int64(0o755)
		if m != "" {
			if mode, err = strconv.ParseInt(m, 8, 32); err != nil {
				return fmt.Errorf("-mkdir %q: %w", d, err)
			}
		}
		tree.AddDir(dest, mode, 0, 0)
	}
	if o.busybox != "" {
		if err := tree.CopyFile("bin/busybox", o.busybox, 0o755); err != nil {
			return err
		}
		list, err := exec.Command(o.busybox, "--list").Output()
		if err != nil {
			return fmt.Errorf("busybox --list: %w", err)
		}
		for _, applet := range strings.Fields(string(list)) {
			if applet != "busybox" {
				tree.AddSymlink("bin/"+applet, "busybox")
			}
		}
		tree.AddDir("tmp", 0o1777, 0, 0)
	}
	if o.passwd != "" {
		parts := strings.Split(o.passwd, ":")
		if len(parts) != 3 {
			return fmt.Errorf("-passwd %q: want NAME:UID:GID", o.passwd)
		}
		pw := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\n%s:x:%s:%s:%s:/home/%s:/sbin/nologin\n", parts[0], parts[1], parts[2], parts[0], parts[0])
		gr := fmt.Sprintf("root:x:0:\n%s:x:%s:\n", parts[0], parts[2])
		tree.AddFile("etc/passwd", 0o644, []byte(pw))
		tree.AddFile("etc/group", 0o644, []byte(gr))
		uid, _ := strconv.Atoi(parts[1])
		gid, _ := strconv.Atoi(parts[2])
		tree.AddDir("home/"+parts[0], 0o750, uid, gid)
	}

	data, err := tree.Tar(time.Unix(0, 0))
	if err != nil {
		return fmt.Errorf("layer: %w", err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		return fmt.Errorf("layer: %w", err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg := cf.Config
	cfg.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin"}, o.env...)
	if o.entrypoint != "" {
		cfg.Entrypoint = strings.Fields(o.entrypoint)
	}
	cfg.User, cfg.WorkingDir = o.user, o.workdir
	img, err = mutate.Config(img, cfg)
	if err != nil {
		return err
	}
	img, err = mutate.CreatedAt(img, v1.Time{Time: time.Unix(0, 0)})
	if err != nil {
		return err
	}
	cf2, _ := img.ConfigFile()
	cf2.OS, cf2.Architecture = "linux", "amd64"
	if img, err = mutate.ConfigFile(img, cf2); err != nil {
		return err
	}
	tmp := o.out + ".tmp"
	if err := tarball.WriteToFile(tmp, ref, img); err != nil {
		return fmt.Errorf("write %s: %w", o.out, err)
	}
	return os.Rename(tmp, o.out)
}
