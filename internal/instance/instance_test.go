package instance

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestAliveWhileHeldDeadAfterClose(t *testing.T) {
	dir := t.TempDir()
	i, err := Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !Alive(dir, i.ID) {
		t.Fatal("a running instance is reported dead")
	}
	if err := i.Close(); err != nil {
		t.Fatal(err)
	}
	if Alive(dir, i.ID) {
		t.Fatal("a closed instance is reported alive")
	}
	if !Alive(dir, "not-an-id") || !Alive(dir, "srv-../../etc") {
		t.Fatal("a malformed id was taken for a dead server")
	}
}

// TestDeadAfterKill: a process killed with SIGKILL holds no lock any more, so its instance is dead.
func TestDeadAfterKill(t *testing.T) {
	if os.Getenv("INSTANCE_HELPER") != "" {
		i, err := Start(os.Getenv("INSTANCE_HELPER"))
		if err != nil {
			os.Exit(2)
		}
		os.Stdout.WriteString(i.ID + "\n")
		time.Sleep(time.Minute)
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDeadAfterKill$")
	cmd.Env = append(os.Environ(), "INSTANCE_HELPER="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, _ := out.Read(buf)
	id := strings.TrimSpace(string(buf[:n]))
	if !Alive(dir, id) {
		t.Fatalf("the helper's instance %q is reported dead while it runs", id)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if Alive(dir, id) {
		t.Fatal("a killed process's instance is reported alive")
	}
	if _, err := os.Stat(filepath.Join(dir, id+".lock")); !os.IsNotExist(err) {
		t.Fatal("the dead instance's file was not removed")
	}
}
