package toolrun

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestProcState(t *testing.T) {
	for stat, want := range map[string]string{
		"42 (terraform) S 1 42 42 0 -1":          "S",
		"43 (kube (exec) plugin) Z 1 43 43 0 -1": "Z",
		"44 (a) b) R 1":                          "R",
		"45 (x)":                                 "",
		"garbage":                                "",
	} {
		if got := procState(stat); got != want {
			t.Errorf("procState(%q) = %q, want %q", stat, got, want)
		}
	}
}

func TestStrays(t *testing.T) {
	root := t.TempDir()
	for pid, stat := range map[string]string{
		"1":  "1 (agent-sandbox) S 0 1 1",
		"7":  "7 (terraform-provider) S 1 7 7",
		"8":  "8 (sh) Z 1 8 8",
		"9":  "9 (sleep) S 1 9 9",
		"99": "",
	} {
		dir := filepath.Join(root, pid)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if stat != "" {
			if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.Mkdir(filepath.Join(root, "self"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := strays(root, 1)
	slices.Sort(got)
	if err != nil || !slices.Equal(got, []int{7, 9}) {
		t.Errorf("strays = %v, %v", got, err)
	}
}

func TestProtectProcessOutsideAContainer(t *testing.T) {
	if err := ProtectProcess(); err != nil {
		t.Fatal(err)
	}
	// Not PID 1: the sweep leaves the machine's processes alone.
	if os.Getpid() != 1 {
		if err := sweepStrays(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSweepStraysAsPID1 runs itself as PID 1 of a new PID namespace (as the runner is in its container)
// and checks that a process Terraform leaves behind is killed and fails the run.
func TestSweepStraysAsPID1(t *testing.T) {
	if os.Getenv("RUNNER_TEST_AS_PID1") == "1" {
		if os.Getpid() != 1 {
			t.Fatalf("pid %d", os.Getpid())
		}
		tf := fakeTerraform(t, `sleep 300 & echo done`)
		_, _, err := tf.run(context.Background(), false, "plan")
		if !errors.Is(err, ErrStrayProcess) {
			t.Fatalf("a stray survived: %v", err)
		}
		if left, _ := strays("/proc", 1); len(left) != 0 {
			t.Fatalf("still running: %v", left)
		}
		clean := fakeTerraform(t, `echo done`)
		if _, _, err := clean.run(context.Background(), false, "plan"); err != nil {
			t.Fatalf("clean run: %v", err)
		}
		// A process that exits by itself soon after (a provider plugin shutting down) is no stray.
		slow := fakeTerraform(t, `sleep 0.3 >/dev/null 2>&1 & echo done`)
		if _, _, err := slow.run(context.Background(), false, "plan"); err != nil {
			t.Fatalf("slow exit: %v", err)
		}
		return
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil || os.Geteuid() != 0 {
		t.Skip("needs root and unshare(1) to make a PID namespace")
	}
	cmd := exec.Command(unshare, "--pid", "--fork", "--mount-proc", os.Args[0], "-test.run=^TestSweepStraysAsPID1$", "-test.v")
	cmd.Env = append(os.Environ(), "RUNNER_TEST_AS_PID1=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestSweepStraysAsPID1") {
		t.Fatalf("as PID 1: %v\n%s", err, out)
	}
}
