package toolrun

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/agent-sandbox/agent-sandbox/internal/tfcheck"
)

// ProviderVersion is the kubernetes provider version the runner image mirrors; it is the only one a
// workspace can use.
const ProviderVersion = "1.13.4"

// MaxWorkspaceNameLength bounds a workspace name (the policy allows 40): it becomes part of Secret names.
const MaxWorkspaceNameLength = 40

// CheckOptions are the allowlist's settings for workspaces and saved plans: the mirrored provider, and
// the backend every plan records — Terraform's implicit local backend (the runner keeps the state file in
// the working directory and stores it itself, see state.go).
func CheckOptions() tfcheck.Options {
	o := tfcheck.Options{ProviderVersion: ProviderVersion}
	o.Backend.Type = "local"
	return o
}

// loadWorkspace reads and checks the workspace folder src (normally the read-only ConfigMap volume at
// /workspace) and returns its files. The check parses every file against the allowlist (tfcheck): a
// workspace that could run a program, read a file, reach the network or use another provider is refused
// here, before Terraform starts.
func loadWorkspace(src string) (map[string][]byte, error) {
	files, err := tfcheck.CheckDir(src, CheckOptions())
	if err != nil {
		return nil, fmt.Errorf("workspace %s: %w", src, err)
	}
	return files, nil
}

// writeFiles writes files into dir.
func writeFiles(dir string, files map[string][]byte) error {
	for name, data := range files {
		if name != filepath.Base(name) || strings.HasPrefix(name, "..") {
			return fmt.Errorf("file name %q", name)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	return nil
}

// ValidateWorkspaceName checks a workspace name: a DNS label of at most MaxWorkspaceNameLength characters
// (it names the state Secret, tfstate-default-<workspace>) that does not end in "-<number>" (newer
// Terraform versions reserve that suffix for state split over several Secrets).
func ValidateWorkspaceName(ws string) error {
	if len(validation.IsDNS1123Label(ws)) > 0 {
		return fmt.Errorf("workspace %q: use lowercase letters, digits and '-', starting and ending with a letter or digit", ws)
	}
	if len(ws) > MaxWorkspaceNameLength {
		return fmt.Errorf("workspace %q: longer than %d characters", ws, MaxWorkspaceNameLength)
	}
	if i := strings.LastIndexByte(ws, '-'); i >= 0 && strings.Trim(ws[i+1:], "0123456789") == "" {
		return fmt.Errorf("workspace %q: must not end in -<number>", ws)
	}
	return nil
}
