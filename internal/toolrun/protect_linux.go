//go:build linux

package toolrun

import (
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ProtectProcess makes the runner non-dumpable, so that other processes of its user (code the workspace
// makes Terraform run) cannot open /proc/<runner>/fd/1 and write a forged result line to its stdout.
// Terraform and its children are dumpable again after exec, which does not matter: their output reaches
// the container only through the runner's pipes, which are closed before the result is printed.
func ProtectProcess() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl PR_SET_DUMPABLE: %w", err)
	}
	return nil
}

// strayGrace is how long processes that outlive Terraform get to exit by themselves (a provider plugin
// still shutting down) before they are killed.
const strayGrace = 2 * time.Second

// sweepStrays runs after each Terraform command. When the runner is its container's PID 1 (the sandbox's
// tool container runs it directly, and pod specs may not share process namespaces), every other process
// in the container descends from Terraform. Those still running after strayGrace are killed and make the
// run fail with ErrStrayProcess; all are reaped (PID 1 inherits orphans). The runner reads Terraform's
// results only after the sweep, so nothing can change them between its reads. Anywhere else (tests, a
// shell) it does nothing.
func sweepStrays() error {
	if os.Getpid() != 1 {
		return nil
	}
	deadline := time.Now().Add(strayGrace)
	killed := 0
	for attempt := 0; ; attempt++ {
		reapOrphans()
		pids, err := strays("/proc", 1)
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			if attempt > int(strayGrace/(20*time.Millisecond))+100 {
				return fmt.Errorf("%w: processes keep appearing", ErrStrayProcess)
			}
			for _, pid := range pids {
				if syscall.Kill(pid, syscall.SIGKILL) == nil {
					killed++
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if killed > 0 {
		return fmt.Errorf("%w: %d process(es)", ErrStrayProcess, killed)
	}
	return nil
}

// reapOrphans collects the exit status of adopted orphans so that they do not stay zombies. It runs only
// between Terraform commands, when the runner has no child of its own to wait for.
func reapOrphans() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
