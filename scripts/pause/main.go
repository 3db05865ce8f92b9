// Command pause is the local cluster's pod sandbox ("pause") container: it holds the pod's namespaces,
// reaps orphaned children and exits on SIGINT/SIGTERM. The upstream image cannot be pulled here (no
// registry), so scripts/images.sh builds this one.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
