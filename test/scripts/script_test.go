package scripts

import (
	"io"
	"os/exec"
	"path/filepath"
	"testing"
)

// runScript runs the repository's scripts/name with bash and args, from dir (the test's folder when empty),
// with exactly env, and returns its exit code; a script that cannot be started fails the test.
func runScript(t *testing.T, name, dir string, env []string, stdout, stderr io.Writer, args ...string) int {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("..", "..", "scripts", name))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", append([]string{script}, args...)...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = stdout, stderr
	err = cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0
}
