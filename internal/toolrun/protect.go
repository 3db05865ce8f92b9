package toolrun

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ErrStrayProcess means a process that Terraform started outlived it. Terraform runs code from the
// workspace (a provider's exec credential plugin, a local-exec provisioner) as the runner's own user; a
// process left behind could rewrite the saved plan between the runner's reads of it, or write to the
// container's output. The runner kills it and fails the run.
var ErrStrayProcess = errors.New("a process started by terraform outlived it (killed); the workspace runs code the runner does not allow")

// procState returns the state letter of a /proc/<pid>/stat line ("R", "S", "Z", ...). The command name
// is in parentheses and may itself hold spaces and parentheses, so the state follows the last ')'.
func procState(stat string) string {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return ""
	}
	fields := strings.Fields(stat[i+1:])
	if len(fields) == 0 {
		return ""
	}
	return fields[0]
}

// strays lists the live processes under procRoot other than self (zombies are dead already).
func strays(procRoot string, self int) ([]int, error) {
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		stat, err := os.ReadFile(procRoot + "/" + e.Name() + "/stat")
		if err != nil {
			// It exited while we looked.
			continue
		}
		if procState(string(stat)) != "Z" {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}
