package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/internal/clientconfig"
)

// Where the MCP server looks for its files when no flag names them. A flag wins, then the environment
// variable, then the client folder that `make install-client` fills (~/.config/agent-sandbox), then the
// working directory (a checkout of the repository). A desktop MCP client starts the server in a folder of
// its choosing, so the installed folder comes before the working directory.
const (
	envPolicy     = "AGENT_SANDBOX_POLICY"
	envWorkspaces = "AGENT_SANDBOX_WORKSPACES"
	// repoPolicy and repoWorkspaces are the files of a checkout, relative to the working directory.
	repoPolicy     = "policy/policy.yaml"
	repoWorkspaces = "terraform"
)

// clientPaths resolves the MCP client's default files. getenv and stat are the process's unless a test
// replaces them.
type clientPaths struct {
	getenv func(string) string
	stat   func(string) (os.FileInfo, error)
}

func newClientPaths() clientPaths { return clientPaths{getenv: os.Getenv, stat: os.Stat} }

// dir is the client folder, or "" when neither $XDG_CONFIG_HOME nor $HOME says where it is.
func (c clientPaths) dir() string {
	d, err := clientconfig.Dir(c.getenv)
	if err != nil {
		return ""
	}
	return d
}

// first returns the first candidate that exists as a file (or a folder, when folder is set).
func (c clientPaths) first(folder bool, candidates ...string) (string, bool) {
	for _, p := range candidates {
		if p == "" {
			continue
		}
		if fi, err := c.stat(p); err == nil && fi.IsDir() == folder {
			return p, true
		}
	}
	return "", false
}

// tried names the candidates for an error message.
func tried(candidates ...string) string {
	var out []string
	for _, p := range candidates {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, " or ")
}

// policy resolves --policy.
func (c clientPaths) policy(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	if v := c.getenv(envPolicy); v != "" {
		return v, nil
	}
	candidates := []string{c.join(clientconfig.PolicyName), repoPolicy}
	if p, ok := c.first(false, candidates...); ok {
		return p, nil
	}
	return "", fmt.Errorf("no policy file: --policy not given, $%s not set, and no %s; pass --policy FILE or run `make install-client` (it copies the policy to %s)",
		envPolicy, tried(c.join(clientconfig.PolicyName), c.cwd(repoPolicy)), c.join(clientconfig.PolicyName))
}

// workspaces resolves --workspaces.
func (c clientPaths) workspaces(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	if v := c.getenv(envWorkspaces); v != "" {
		return v, nil
	}
	candidates := []string{c.join(clientconfig.WorkspacesName), repoWorkspaces}
	if p, ok := c.first(true, candidates...); ok {
		return p, nil
	}
	return "", fmt.Errorf("no workspaces folder: --workspaces not given, $%s not set, and no folder %s; pass --workspaces DIR or run `make install-client` (it copies the demo workspace to %s)",
		envWorkspaces, tried(c.join(clientconfig.WorkspacesName), c.cwd(repoWorkspaces)), c.join(clientconfig.WorkspacesName))
}

// mcpKubeconfig resolves the MCP server's --kubeconfig: the client folder's mcp.kubeconfig when it
// exists, else $KUBECONFIG (what the server did before the client folder existed).
func (c clientPaths) mcpKubeconfig(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	if p, ok := c.first(false, c.join(clientconfig.KubeconfigName)); ok {
		return p, nil
	}
	if v := c.getenv("KUBECONFIG"); v != "" {
		return v, nil
	}
	return "", fmt.Errorf("no kubeconfig: --kubeconfig not given, no %s, and $KUBECONFIG not set; the server needs the sandbox namespace's credentials: write them with `agent-sandbox kubeconfig refresh` (sudo make deploy does it for you on the local cluster)",
		tried(c.join(clientconfig.KubeconfigName)))
}

// join is a file in the client folder, or "" when there is no client folder.
func (c clientPaths) join(name string) string {
	d := c.dir()
	if d == "" {
		return ""
	}
	return filepath.Join(d, name)
}

// cwd names a relative candidate with the working directory, for messages.
func (c clientPaths) cwd(rel string) string {
	if wd, err := os.Getwd(); err == nil {
		return filepath.Join(wd, rel)
	}
	return rel
}
