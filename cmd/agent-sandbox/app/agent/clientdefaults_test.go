package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/cli"
)

// TestClientPaths: a flag wins, then the environment, then ~/.config/agent-sandbox, then the working
// directory; a missing default names everything it tried; the MCP kubeconfig falls back to $KUBECONFIG
// only when the client folder has none (what the server did before the folder existed).
func TestClientPaths(t *testing.T) {
	home := t.TempDir()
	repo := t.TempDir()
	t.Chdir(repo)
	cfgDir := filepath.Join(home, ".config", "agent-sandbox")
	env := map[string]string{"HOME": home}
	c := clientPaths{getenv: func(k string) string { return env[k] }, stat: os.Stat}
	mkfile := func(p string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	mkdir := func(p string) {
		t.Helper()
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	check := func(what string, f func(string) (string, error), flag, want, wantErr string) {
		t.Helper()
		got, err := f(flag)
		switch {
		case wantErr != "":
			if err == nil || !strings.Contains(err.Error(), wantErr) {
				t.Errorf("%s: %q, %v; want an error with %q", what, got, err, wantErr)
			}
		case err != nil || got != want:
			t.Errorf("%s: %q, %v; want %q", what, got, err, want)
		}
	}

	// Nothing anywhere: the errors name both places.
	check("policy, nothing", c.policy, "", "", filepath.Join(cfgDir, "policy.yaml")+" or "+filepath.Join(repo, "policy/policy.yaml"))
	check("workspaces, nothing", c.workspaces, "", "", filepath.Join(cfgDir, "workspaces")+" or "+filepath.Join(repo, "terraform"))
	check("kubeconfig, nothing", c.mcpKubeconfig, "", "", "agent-sandbox kubeconfig refresh")

	// A checkout: the working directory's files.
	mkfile(filepath.Join(repo, "policy", "policy.yaml"))
	mkdir(filepath.Join(repo, "terraform"))
	check("policy, checkout", c.policy, "", "policy/policy.yaml", "")
	check("workspaces, checkout", c.workspaces, "", "terraform", "")
	env["KUBECONFIG"] = "/etc/admin.kubeconfig"
	check("kubeconfig, $KUBECONFIG", c.mcpKubeconfig, "", "/etc/admin.kubeconfig", "")

	// After make install-client: the client folder wins over the working directory and $KUBECONFIG.
	mkfile(filepath.Join(cfgDir, "policy.yaml"))
	mkdir(filepath.Join(cfgDir, "workspaces"))
	mkfile(filepath.Join(cfgDir, "mcp.kubeconfig"))
	check("policy, installed", c.policy, "", filepath.Join(cfgDir, "policy.yaml"), "")
	check("workspaces, installed", c.workspaces, "", filepath.Join(cfgDir, "workspaces"), "")
	check("kubeconfig, installed", c.mcpKubeconfig, "", filepath.Join(cfgDir, "mcp.kubeconfig"), "")

	// $XDG_CONFIG_HOME moves the client folder.
	xdg := t.TempDir()
	env["XDG_CONFIG_HOME"] = xdg
	mkfile(filepath.Join(xdg, "agent-sandbox", "policy.yaml"))
	check("policy, XDG", c.policy, "", filepath.Join(xdg, "agent-sandbox", "policy.yaml"), "")
	delete(env, "XDG_CONFIG_HOME")

	// The environment beats the folders, a flag beats everything.
	env[envPolicy], env[envWorkspaces] = "/env/policy.yaml", "/env/ws"
	check("policy, env", c.policy, "", "/env/policy.yaml", "")
	check("workspaces, env", c.workspaces, "", "/env/ws", "")
	check("policy, flag", c.policy, "/flag/policy.yaml", "/flag/policy.yaml", "")
	check("workspaces, flag", c.workspaces, "/flag/ws", "/flag/ws", "")
	check("kubeconfig, flag", c.mcpKubeconfig, "/flag/kc", "/flag/kc", "")

	// A file where a folder is expected (and the reverse) does not count.
	delete(env, envWorkspaces)
	if err := os.RemoveAll(filepath.Join(cfgDir, "workspaces")); err != nil {
		t.Fatal(err)
	}
	mkfile(filepath.Join(cfgDir, "workspaces"))
	check("workspaces, a file in the way", c.workspaces, "", "terraform", "")
}

// TestMCPMissingDefaultsExit3: `agent-sandbox mcp` with nothing to find exits 3 (not found) and names
// what it tried, all in one message.
func TestMCPMissingDefaultsExit3(t *testing.T) {
	t.Chdir(t.TempDir())
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", "")
	t.Setenv("KUBECONFIG", "")
	t.Setenv(envPolicy, "")
	t.Setenv(envWorkspaces, "")
	code, stdout, stderr := testMain.Capture("mcp")
	if code != cli.ExitNotFound || stdout != "" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	for _, want := range []string{"no policy file", "no workspaces folder", "no kubeconfig", filepath.Join(home, ".config", "agent-sandbox", "policy.yaml")} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q: %s", want, stderr)
		}
	}
}
