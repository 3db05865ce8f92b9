package scripts

import (
	"bytes"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
)

// fakeBinary stands in for bin/agent-sandbox: it answers --version and records every other call.
func fakeBinary(t *testing.T, dir string) (bin, calls string) {
	t.Helper()
	bin, calls = filepath.Join(dir, "agent-sandbox"), filepath.Join(dir, "binary-calls")
	script := "#!/bin/sh\n[ \"$1\" = --version ] && { echo 'agent-sandbox test'; exit 0; }\necho \"$*\" >> " + calls + "\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, calls
}

func runInstallClient(t *testing.T, env []string, bin string) (int, string) {
	t.Helper()
	var out bytes.Buffer
	code := runScript(t, "install-client.sh", "", env, &out, &out, bin)
	t.Logf("install-client: exit %d\n%s", code, out.String())
	return code, out.String()
}

// TestInstallClient installs for the user running the test into a temporary home: the binary in
// ~/.local/bin, the repository's policy and demo workspace in ~/.config/agent-sandbox, private folders;
// a second run keeps the person's workspace and backs up a policy they changed. With a kubeconfig at hand
// it asks `agent-sandbox kubeconfig refresh` for the MCP kubeconfig, into the client folder.
func TestInstallClient(t *testing.T) {
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o755); err != nil {
		t.Fatal(err)
	}
	bin, calls := fakeBinary(t, dir)
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "AGENT_SANDBOX_STATE=" + filepath.Join(dir, "state"),
		"AGENT_SANDBOX_CACHE=" + filepath.Join(dir, "cache")}
	code, out := runInstallClient(t, env, bin)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	cfg := filepath.Join(home, ".config", "agent-sandbox")
	policy, _ := os.ReadFile("../../policy/policy.yaml")
	checks := []struct {
		path string
		mode os.FileMode
		dir  bool
	}{
		{filepath.Join(home, ".local", "bin", "agent-sandbox"), 0o755, false},
		{cfg, 0o700, true},
		{filepath.Join(cfg, "policy.yaml"), 0o644, false},
		{filepath.Join(cfg, "workspaces"), 0o700, true},
		{filepath.Join(cfg, "workspaces", "k8s-demo"), 0o700, true},
		{filepath.Join(cfg, "workspaces", "k8s-demo", "main.tf"), 0o644, false},
	}
	for _, c := range checks {
		fi, err := os.Stat(c.path)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		if fi.IsDir() != c.dir || fi.Mode().Perm() != c.mode {
			t.Errorf("%s: %v, want %v (folder %v)", c.path, fi.Mode(), c.mode, c.dir)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(cfg, "policy.yaml")); !bytes.Equal(got, policy) {
		t.Error("the installed policy is not the repository's")
	}
	if _, err := os.Stat(calls); err == nil {
		t.Error("without a kubeconfig at hand the binary was asked for one")
	}
	if !strings.Contains(out, "no MCP kubeconfig yet") {
		t.Errorf("no hint for the MCP kubeconfig: %s", out)
	}

	// The person edits the workspace and the policy; a second run keeps the workspace and backs up the policy.
	mainTF := filepath.Join(cfg, "workspaces", "k8s-demo", "main.tf")
	if err := os.WriteFile(mainTF, []byte("# mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg, "policy.yaml"), []byte("# mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(dir, "admin.kubeconfig")
	if err := os.WriteFile(kc, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _ := runInstallClient(t, append(env, "KUBECONFIG="+kc), bin); code != 0 {
		t.Fatalf("second run: exit %d", code)
	}
	if got, _ := os.ReadFile(mainTF); string(got) != "# mine\n" {
		t.Error("the person's workspace was overwritten")
	}
	if got, _ := os.ReadFile(filepath.Join(cfg, "policy.yaml.bak")); string(got) != "# mine\n" {
		t.Error("the person's policy was not kept as policy.yaml.bak")
	}
	if got, _ := os.ReadFile(filepath.Join(cfg, "policy.yaml")); !bytes.Equal(got, policy) {
		t.Error("the policy was not reinstalled")
	}
	got, _ := os.ReadFile(calls)
	want := "kubeconfig refresh --policy " + filepath.Join(cfg, "policy.yaml") + " --out " + filepath.Join(cfg, "mcp.kubeconfig")
	if os.Geteuid() == 0 {
		me, err := user.Current()
		if err != nil {
			t.Fatal(err)
		}
		want += " --owner " + me.Username
	}
	if want += " --kubeconfig " + kc + "\n"; string(got) != want {
		t.Errorf("binary called with\n%q\nwant\n%q", got, want)
	}
}

// TestInstallClientForAnotherUserNeedsRoot: installing into someone else's home is root's business.
func TestInstallClientForAnotherUserNeedsRoot(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root may install for anyone")
	}
	dir := t.TempDir()
	bin, _ := fakeBinary(t, dir)
	code, out := runInstallClient(t, []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "INSTALL_USER=root"}, bin)
	if code == 0 || !strings.Contains(out, "installing for root needs root: sudo make install-client INSTALL_USER=root") {
		t.Errorf("exit %d: %s", code, out)
	}
}
