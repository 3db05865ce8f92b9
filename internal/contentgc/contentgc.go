// Package contentgc deletes the sandbox namespace's content-addressed ConfigMaps — Terraform workspaces
// (tfws-…) and saved plans (tfplan-…) that the MCP server uploads — once no approval that could name them
// is still valid. The MCP server cannot delete them itself (its role has no delete), so the webhook, which
// runs in the cluster all the time, does.
//
// Trust role: in the cluster, trusted: upkeep run by every webhook replica beside serving. It decides
// nothing about admission and never imports the decision package.
package contentgc

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
)

// Pruner deletes the sandbox namespace's content-addressed ConfigMaps (workspaces, tfws-…, and saved
// plans, tfplan-…) once they are older than the approval request lifetime: by then no approval that could
// name them is still valid.
type Pruner struct {
	Client    client.Client
	Namespace string
	// MaxAge is the policy's approval request TTL.
	MaxAge time.Duration
	Now    func() time.Time
}

// Prune deletes the expired ConfigMaps and returns how many it deleted.
func (p *Pruner) Prune(ctx context.Context) (int, error) {
	var list corev1.ConfigMapList
	if err := p.Client.List(ctx, &list, client.InNamespace(p.Namespace)); err != nil {
		return 0, fmt.Errorf("list ConfigMaps of %s: %w", p.Namespace, err)
	}
	now := time.Now
	if p.Now != nil {
		now = p.Now
	}
	cutoff := now().Add(-p.MaxAge)
	n := 0
	for i := range list.Items {
		cm := &list.Items[i]
		if !strings.HasPrefix(cm.Name, contract.WorkspaceConfigMapPrefix) && !strings.HasPrefix(cm.Name, contract.PlanConfigMapPrefix) {
			continue
		}
		if cm.CreationTimestamp.After(cutoff) {
			continue
		}
		if err := p.Client.Delete(ctx, cm); err != nil && !apierrors.IsNotFound(err) {
			return n, fmt.Errorf("delete expired ConfigMap %s: %w", cm.Name, err)
		}
		n++
	}
	return n, nil
}
