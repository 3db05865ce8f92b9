package harness

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// process is a child process whose output goes to a log file.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	err     error
}

// startProcess starts bin with args and env (added to a minimal environment), logging to a file in dir.
func startProcess(name, dir, bin string, args, env []string) (*process, error) {
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%s log: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}, env...)
	// Its own process group, so that a Ctrl-C on the test does not race our orderly stop.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, bin, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, and SIGKILL if the process has not exited after grace.
func (p *process) stop(grace time.Duration) {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// tail returns the last n lines of the log.
func (p *process) tail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", p.logPath, err)
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// dumpOnFailure prints the log's tail if the test failed.
func (p *process) dumpOnFailure(t testing.TB) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s log %s (last 60 lines):\n%s", p.name, p.logPath, p.tail(60))
		}
	})
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago: for a child process (Vault, the
// webhook, an MCP server under a benchmark) told to listen on it.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// requireEnv returns the environment variable's value, failing the test with how to set it if it is empty.
func requireEnv(t testing.TB, name, what string) string {
	t.Helper()
	v := os.Getenv(name)
	if strings.TrimSpace(v) == "" {
		t.Fatalf("%s is not set: it must name %s. Run integration tests through scripts/test-integration.sh, which builds the binaries and sets it.", name, what)
	}
	return v
}

// requireExecutable fails the test if path is not an executable file.
func requireExecutable(t testing.TB, path, from string) {
	t.Helper()
	fi, err := os.Stat(path)
	if err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return
	}
	if err == nil {
		err = errors.New("not an executable file")
	}
	t.Fatalf("%s (from %s): %v", path, from, err)
}
