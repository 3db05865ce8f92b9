package service

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/internal/runner"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/tfcheck"
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
	files, err := readWorkspace(filepath.Join(s.WorkspaceDir, name))
	if err != nil {
		return "", fmt.Errorf("workspace %s: %w", name, err)
	}
	// The same allowlist the sandbox enforces before any credential: a refused workspace fails here, fast
	// and with every reason, instead of in a Pod.
	raw := make(map[string][]byte, len(files))
	for n, d := range files {
		raw[n] = []byte(d)
	}
	if err := tfcheck.Check(raw, runner.CheckOptions()); err != nil {
		return "", fmt.Errorf("workspace %s: %w", name, err)
	}
	cm := sandbox.WorkspaceConfigMapName(files)
	if err := s.Workspaces.EnsureWorkspace(ctx, cm, files); err != nil {
		return "", fmt.Errorf("publish workspace %s: %w", name, err)
	}
	return cm, nil
}

func readWorkspace(dir string) (map[string]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, fmt.Errorf("no such workspace folder %s", dir)
		}
		return nil, err
	}
	files := map[string]string{}
	total := 0
	for _, e := range entries {
		if !e.Type().IsRegular() || !tfcheck.IsWorkspaceFile(e.Name()) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		total += len(data)
		if total > maxWorkspaceBytes {
			return nil, fmt.Errorf("its Terraform files exceed %d KiB", maxWorkspaceBytes>>10)
		}
		files[e.Name()] = string(data)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no Terraform files (*.tf) in %s", dir)
	}
	return files, nil
}
