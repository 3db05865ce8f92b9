package tfcheck

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// tfEnv runs real terraform (v1.11, /usr/local/bin/terraform) in a fresh folder, offline: no CLI
// configuration of the machine, no checkpoint calls, providers only from a filesystem mirror if one
// is given.
type tfEnv struct {
	t      *testing.T
	bin    string
	dir    string
	config string
}

// newTF returns a terraform environment for files, or skips the test when terraform is missing.
func newTF(t *testing.T, files map[string]string) *tfEnv {
	t.Helper()
	if testing.Short() {
		t.Skip("runs real terraform; skipped in -short mode")
	}
	bin, err := exec.LookPath("terraform")
	if err != nil {
		t.Skip("terraform is not installed (want v1.11.x in PATH, e.g. /usr/local/bin/terraform)")
	}
	dir := t.TempDir()
	config := filepath.Join(t.TempDir(), "terraformrc")
	if err := os.WriteFile(config, []byte("disable_checkpoint = true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return &tfEnv{t: t, bin: bin, dir: dir, config: config}
}

// run runs terraform with args in the environment's folder and returns its combined output.
func (e *tfEnv) run(args ...string) (string, error) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.bin, args...)
	cmd.Dir = e.dir
	cmd.Env = append(os.Environ(),
		"TF_CLI_CONFIG_FILE="+e.config,
		"TF_IN_AUTOMATION=1",
		"TF_INPUT=0",
		"CHECKPOINT_DISABLE=1",
		"TF_DATA_DIR="+filepath.Join(e.dir, ".terraform"),
	)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// mustRun runs terraform and fails the test if it fails.
func (e *tfEnv) mustRun(args ...string) string {
	e.t.Helper()
	out, err := e.run(args...)
	if err != nil {
		e.t.Fatalf("terraform %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// plan runs terraform init and plan -out and returns the saved plan.
func (e *tfEnv) plan() []byte {
	e.t.Helper()
	e.mustRun("init", "-input=false", "-no-color")
	e.mustRun("plan", "-input=false", "-no-color", "-out=saved.tfplan")
	b, err := os.ReadFile(filepath.Join(e.dir, "saved.tfplan"))
	if err != nil {
		e.t.Fatal(err)
	}
	return b
}

func readFile(name string) ([]byte, error) { return os.ReadFile(name) }
