// Package clientconfig is the MCP server's side of a desktop install: the folder
// ~/.config/agent-sandbox (policy.yaml, workspaces/, mcp.kubeconfig) that `make install-client` fills and
// `agent-sandbox mcp` reads by default, and the MCP kubeconfig itself: rendered from nothing but a server,
// its CA and a ServiceAccount token, and written atomically, mode 0600, owned by the user whose MCP client
// reads it.
package clientconfig

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/agent-sandbox/agent-sandbox/internal/atomicfile"
)

// Names inside the client folder.
const (
	// DirName is the folder under $XDG_CONFIG_HOME (default ~/.config).
	DirName = "agent-sandbox"
	// KubeconfigName is the MCP server's kubeconfig, limited to the sandbox namespace.
	KubeconfigName = "mcp.kubeconfig"
	// PolicyName is the user's copy of the policy the webhook enforces.
	PolicyName = "policy.yaml"
	// WorkspacesName holds one sub-folder of Terraform files per workspace.
	WorkspacesName = "workspaces"
)

// KubeconfigMode is the MCP kubeconfig's mode: it holds a bearer token.
const KubeconfigMode os.FileMode = 0o600

// Dir is the client folder of the current user: $XDG_CONFIG_HOME/agent-sandbox when XDG_CONFIG_HOME is an
// absolute path (the XDG rule), else $HOME/.config/agent-sandbox.
func Dir(getenv func(string) string) (string, error) {
	if x := getenv("XDG_CONFIG_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, DirName), nil
	}
	home := getenv("HOME")
	if home == "" {
		return "", errors.New("neither $XDG_CONFIG_HOME nor $HOME is set: cannot place ~/.config/agent-sandbox")
	}
	return DirOfHome(home), nil
}

// DirOfHome is the client folder of the user whose home is home. It is what root uses for another user
// (whose XDG_CONFIG_HOME it cannot know), and what `make install-client` fills.
func DirOfHome(home string) string { return filepath.Join(home, ".config", DirName) }

// Cluster is what the MCP kubeconfig keeps of the operator's cluster entry: where the API server is and
// how to recognise it. Nothing that authenticates is ever taken from the operator's kubeconfig.
type Cluster struct {
	// Server is the API server's URL (https).
	Server string
	// CAData is the PEM bundle that signs the API server's certificate; empty trusts the system roots.
	CAData []byte
	// TLSServerName, when set, is the name the API server's certificate is checked against.
	TLSServerName string
}

// Credential is the MCP server's identity: a bearer token for ServiceAccount in Namespace. The token is
// the only secret a rendered kubeconfig holds.
type Credential struct {
	Namespace      string
	ServiceAccount string
	Token          string
}

// Names of the cluster, user and context inside the rendered kubeconfig.
const (
	contextName = "agent-sandbox"
	userName    = "agent-sandbox-mcp"
)

// RenderKubeconfig returns a kubeconfig for the MCP server: one cluster (server, CA, TLS server name),
// one user holding only the token, one context whose namespace is the sandbox namespace. It refuses a
// cluster that is not https, or whose server is missing, and a credential without a token or namespace.
func RenderKubeconfig(c Cluster, cred Credential) ([]byte, error) {
	var errs []error
	if !strings.HasPrefix(c.Server, "https://") {
		errs = append(errs, fmt.Errorf("the API server %q is not an https URL: the MCP kubeconfig carries a bearer token and must not send it in clear", c.Server))
	}
	if cred.Token == "" || strings.ContainsAny(cred.Token, " \t\r\n") {
		errs = append(errs, errors.New("the token is empty or not one word"))
	}
	if cred.Namespace == "" {
		errs = append(errs, errors.New("no sandbox namespace"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("render MCP kubeconfig: %w", err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[contextName] = &clientcmdapi.Cluster{Server: c.Server, CertificateAuthorityData: c.CAData, TLSServerName: c.TLSServerName}
	cfg.AuthInfos[userName] = &clientcmdapi.AuthInfo{Token: cred.Token}
	cfg.Contexts[contextName] = &clientcmdapi.Context{Cluster: contextName, AuthInfo: userName, Namespace: cred.Namespace}
	cfg.CurrentContext = contextName
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("render MCP kubeconfig: %w", err)
	}
	return out, nil
}

// Owner is who a written file and the folders made for it belong to.
type Owner struct {
	UID, GID int
}

// WriteFile writes data to path so that a reader sees the old file or the whole new one, never a part: a
// temporary file in the same folder, given to owner (nil: the writer) and mode perm before any byte is
// written, synced, then renamed over path. Missing folders up to path are made with mode 0700 and given
// to owner too. The folder that holds path must be a real folder, not a symbolic link: root writing for
// another user must not be steered elsewhere by a link that user planted.
func WriteFile(path string, data []byte, perm os.FileMode, owner *Owner) error {
	dir := filepath.Dir(path)
	if err := mkdirAll(dir, owner); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("write %s: %s is a symbolic link or not a folder", path, dir)
	}
	return atomicfile.Write(path, data, perm, atomicfile.WithOwner((*atomicfile.Owner)(owner)))
}

// mkdirAll makes dir and its missing parents with mode 0700, each given to owner (when not nil).
func mkdirAll(dir string, owner *Owner) error {
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a folder", dir)
		}
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if parent := filepath.Dir(dir); parent != dir {
		if err := mkdirAll(parent, owner); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if owner != nil {
		if err := os.Lchown(dir, owner.UID, owner.GID); err != nil {
			return fmt.Errorf("give %s to uid %d: %w", dir, owner.UID, err)
		}
	}
	return nil
}
