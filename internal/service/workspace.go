package service

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/oneline"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/scrub"
	"github.com/agent-sandbox/agent-sandbox/internal/tfcheck"
	"github.com/agent-sandbox/agent-sandbox/internal/toolrun"
)

// maxWorkspaceBytes bounds a workspace's files: they travel in one ConfigMap (1 MiB at most).
const maxWorkspaceBytes = 512 << 10

// workspace is a call's workspace: its ConfigMap's name and files, published when the call's Job is about
// to be created (Service.publish).
type workspace struct {
	name    string
	files   map[string]string
	created bool // this call created the ConfigMap
	held    bool // this call counts among the ConfigMap's users (Service.wsUsers)
}

// readWorkspace reads and checks a workspace folder's Terraform files and names the immutable,
// content-addressed ConfigMap that will carry them. The same files always give the same name, so a repeated
// call (the apply after its approval) names the same source. Nothing is published yet: publish does that
// once the call holds its concurrency slot.
func (s *Service) readWorkspace(name string) (*workspace, error) {
	// The policy's pattern for the folder parameter admitted the name already (CheckAgentParams); a name that
	// is not one plain folder name still never reaches the file system.
	if name == "" || name == "." || name == ".." || name != filepath.Base(name) || strings.ContainsRune(name, filepath.Separator) {
		return nil, fmt.Errorf("workspace %q: not a workspace folder name", name)
	}
	// The same filter and allowlist the sandbox applies before any credential (one reader for both): a
	// refused workspace fails here, fast and with every reason, instead of in a Pod.
	dir := filepath.Join(s.WorkspaceDir, name)
	raw, err := tfcheck.ReadWorkspace(dir, toolrun.CheckOptions())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("workspace %s: no such workspace folder %s", name, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("workspace %s: %w", name, err)
	}
	files := make(map[string]string, len(raw))
	total := 0
	for n, d := range raw {
		total += len(d)
		files[n] = string(d)
	}
	if total > maxWorkspaceBytes {
		return nil, fmt.Errorf("workspace %s: its Terraform files exceed %d KiB", name, maxWorkspaceBytes>>10)
	}
	return &workspace{name: sandbox.WorkspaceConfigMapName(files), files: files}, nil
}

// publish creates the call's workspace ConfigMap (or finds it there), counting the call among its users. A
// ConfigMap that cannot be created because the cluster is unreachable is sandbox.ErrClusterDown.
func (s *Service) publish(ctx context.Context, ws *workspace) error {
	s.wsMu.Lock()
	if s.wsUsers == nil {
		s.wsUsers = map[string]int{}
	}
	s.wsUsers[ws.name]++
	ws.held = true
	s.wsMu.Unlock()
	created, err := s.Workspaces.EnsureWorkspace(ctx, ws.name, ws.files)
	if err != nil {
		return fmt.Errorf("publish workspace %s: %w", ws.name, err)
	}
	ws.created = ws.created || created
	return nil
}

// EventWorkspaceDeleted records that a call's workspace ConfigMap was deleted (or could not be) because
// the call was cancelled or failed before its Job existed.
const EventWorkspaceDeleted = "workspace.deleted"

// workspaceDeleteTimeout bounds the deletion of a cancelled call's workspace (the call's own context has
// ended).
const workspaceDeleteTimeout = 10 * time.Second

// releaseWorkspace ends the call's use of its workspace ConfigMap. When unused is set (the call was
// cancelled, or failed before its Job existed, so no Pod mounts it for this call), the ConfigMap is
// deleted if this call created it and no other call of this server uses it now. One that was there before
// the call is another call's (or a pending approval's) and is kept; the webhook's pruner removes what is
// left when it expires. A call that files an approval request publishes nothing: publishing waits for the
// call's concurrency slot, which only a call that runs takes.
func (c *call) releaseWorkspace(ws *workspace, unused bool) {
	if ws == nil || !ws.held {
		return
	}
	s := c.s
	s.wsMu.Lock()
	ws.held = false
	s.wsUsers[ws.name]--
	last := s.wsUsers[ws.name] == 0
	if last {
		delete(s.wsUsers, ws.name)
	}
	s.wsMu.Unlock()
	if !unused || !ws.created || !last {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), workspaceDeleteTimeout)
	defer cancel()
	fields := map[string]any{"configmap": ws.name, "deleted": true}
	if err := s.Workspaces.DeleteWorkspace(ctx, ws.name); err != nil {
		fields["deleted"], fields["error"] = false, oneline.Fold(scrub.String(err.Error()))
		fields["note"] = "left for the webhook's pruner, which removes it when it expires"
	}
	c.audit(EventWorkspaceDeleted, fields)
}
