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
// call (the apply after its approval) names the same source.
func (s *Service) publishWorkspace(ctx context.Context, name string) (string, error) {
	t, err := s.Policy.Tool(ToolPlan)
	if err != nil {
		return "", err
	}
	// Validate the name with the policy's own parameter pattern before it touches the file system.
	if _, err := t.Invoke(map[string]any{"workspace": name, "source": "tfws-" + strings.Repeat("0", 20)}); err != nil {
		return "", err
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
