package service

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/tfcheck"
	"github.com/agent-sandbox/agent-sandbox/internal/toolrun"
)

// maxWorkspaceBytes bounds a workspace's files: they travel in one ConfigMap (1 MiB at most).
const maxWorkspaceBytes = 512 << 10

// publishWorkspace reads a workspace folder and publishes its Terraform files as an immutable,
// content-addressed ConfigMap, returning its name. The same files always give the same name, so a repeated
// call (the apply after its approval) names the same source. A ConfigMap that cannot be created because the
// cluster is unreachable is sandbox.ErrClusterDown.
func (s *Service) publishWorkspace(ctx context.Context, name string) (string, error) {
	// The policy's pattern for the folder parameter admitted the name already (CheckAgentParams); a name that
	// is not one plain folder name still never reaches the file system.
	if name == "" || name == "." || name == ".." || name != filepath.Base(name) || strings.ContainsRune(name, filepath.Separator) {
		return "", fmt.Errorf("workspace %q: not a workspace folder name", name)
	}
	// The same filter and allowlist the sandbox applies before any credential (one reader for both): a
	// refused workspace fails here, fast and with every reason, instead of in a Pod.
	dir := filepath.Join(s.WorkspaceDir, name)
	raw, err := tfcheck.ReadWorkspace(dir, toolrun.CheckOptions())
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("workspace %s: no such workspace folder %s", name, dir)
	}
	if err != nil {
		return "", fmt.Errorf("workspace %s: %w", name, err)
	}
	files := make(map[string]string, len(raw))
	total := 0
	for n, d := range raw {
		total += len(d)
		files[n] = string(d)
	}
	if total > maxWorkspaceBytes {
		return "", fmt.Errorf("workspace %s: its Terraform files exceed %d KiB", name, maxWorkspaceBytes>>10)
	}
	cm := sandbox.WorkspaceConfigMapName(files)
	if err := s.Workspaces.EnsureWorkspace(ctx, cm, files); err != nil {
		return "", fmt.Errorf("publish workspace %s: %w", name, err)
	}
	return cm, nil
}
