package webhook

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/lru"

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/oneline"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/rules"
	"github.com/agent-sandbox/agent-sandbox/internal/scrub"
)

// Denial is a refusal: which rule failed and why, on one line a person can act on.
type Denial struct {
	Rule   string
	Reason string
}

func (d *Denial) Error() string {
	return "agent-sandbox denied this: " + d.Rule + ": " + scrub.String(oneLine(d.Reason))
}

func deny(rule rules.ID, format string, args ...any) *Denial {
	return &Denial{Rule: string(rule), Reason: fmt.Sprintf(format, args...)}
}

// Cluster reads the objects a decision depends on. Reads go straight to the API server, never through a
// cache: a Pod's owner was admitted moments ago, and a stale answer would be a wrong decision.
type Cluster interface {
	GetJob(ctx context.Context, namespace, name string) (*batchv1.Job, error)
	GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
}

// PodLedger records the Jobs the webhook admitted and that a Job has had its one Pod. Like the approval
// ledger it lives in the API server (ledger.ConfigMapLedger) and is shared by every webhook replica, so two
// Pods for one Job cannot both be admitted, and a Job made while no webhook was registered gets no Pod.
type PodLedger interface {
	// RecordJob stores that the webhook admitted the Job with this UID.
	RecordJob(ctx context.Context, job types.UID, expires time.Time) error
	// JobRecorded reports whether RecordJob stored the Job with this UID.
	JobRecorded(ctx context.Context, job types.UID) (bool, error)
	// RecordPod stores that the Job with this UID has had a Pod, or returns ledger.ErrSecondPod.
	RecordPod(ctx context.Context, job types.UID, expires time.Time) error
	// PodRecorded reports whether RecordPod stored the Job with this UID: whether the webhook admitted a
	// Pod of it.
	PodRecorded(ctx context.Context, job types.UID) (bool, error)
}

// Identities describes who may do the few things in a sandbox namespace that nobody else may.
type Identities struct {
	// JobControllerUsers are the API users allowed to create Pods in sandbox namespaces.
	JobControllerUsers []string
	// SchedulerUsers may bind sandbox Pods to nodes (pods/binding).
	SchedulerUsers []string
	// AdminUsers and AdminGroups (the chart's own identity, by default the group system:masters) may
	// change the sandbox namespace's labels and annotations, its NetworkPolicies, ResourceQuotas and
	// LimitRanges. Nobody else may, including namespace admins.
	AdminUsers  []string
	AdminGroups []string
	// MCPUser is the MCP server's identity; it may create only content-addressed workspace and plan
	// ConfigMaps.
	MCPUser string
	// PoolUsers may create warm Jobs (the webhook's own pool controller) and delete workspace and
	// saved-plan ConfigMaps (its pruner). Empty: nobody may.
	PoolUsers []string
	// StatusControllerUsers may write a sandbox Pod's status besides its node and the scheduler
	// (default DefaultStatusControllerUsers).
	StatusControllerUsers []string
	// NamespaceControllerUsers may write the sandbox namespace's status and finalize subresources
	// (default DefaultNamespaceControllerUsers).
	NamespaceControllerUsers []string
	// QuotaControllerUsers may write resourcequotas/status (default DefaultQuotaControllerUsers).
	QuotaControllerUsers []string
	// GCUsers may remove a sandbox Pod's owner reference (default DefaultGCUsers).
	GCUsers []string
	// ServiceAccountControllerUsers may create the sandbox namespace's ServiceAccounts besides the chart's
	// identity: the controller that gives every namespace its "default" one (default
	// DefaultServiceAccountControllerUsers).
	ServiceAccountControllerUsers []string
}

// DefaultJobControllerUsers are the identities under which kube-controller-manager's Job controller
// creates Pods, with and without --use-service-account-credentials.
var DefaultJobControllerUsers = []string{"system:serviceaccount:kube-system:job-controller", "system:kube-controller-manager"}

// DefaultSchedulerUsers is the default scheduler's identity.
var DefaultSchedulerUsers = []string{"system:kube-scheduler"}

// DefaultAdminGroups are the groups that may change the sandbox namespace's protected objects.
var DefaultAdminGroups = []string{"system:masters"}

// Checker makes every admission decision. It holds the current policy and approver keys, both swapped
// atomically when their sources change, so a decision always sees one consistent version of each.
type Checker struct {
	policy atomic.Pointer[policy.Compiled]
	keys   atomic.Pointer[approval.KeySet]
	// Ledger records used approval token IDs; it must be shared by every webhook replica.
	Ledger approval.Ledger
	// Pods records which Jobs have had their Pod; shared by every replica.
	Pods PodLedger
	// Claims records the request IDs of admitted warm-Pod claims; shared by every replica.
	Claims ClaimLedger
	// Anchors records the audit anchor of every admitted call (anchor.go). Without it no call is admitted.
	Anchors AnchorLedger
	// AnchorRetention is how long an audit anchor is kept (DefaultAnchorRetention when zero).
	AnchorRetention time.Duration
	// Cluster reads owner Jobs and the Pods tokens are requested for.
	Cluster Cluster
	// Identities are the privileged users and groups.
	Identities Identities
	// ClaimSigner signs warm claims (claimsign.go); its public keys are part of the warm rendering. Without
	// one, every claim is refused.
	ClaimSigner *ClaimSigner
	// Now is the clock; tests inject one.
	Now func() time.Time

	renderings renderings
}

// SetPolicy swaps in a compiled policy. Callers compile first: a policy that does not compile never
// reaches the checker, so the last good one keeps serving. The renderings cached under the previous
// policy are dropped.
func (c *Checker) SetPolicy(p *policy.Compiled) {
	c.renderings.mu.Lock()
	defer c.renderings.mu.Unlock()
	c.policy.Store(p)
	c.renderings.policy, c.renderings.lru = p, lru.New(maxRenderings)
}

// Policy returns the policy in force, or nil before the first one is set.
func (c *Checker) Policy() *policy.Compiled { return c.policy.Load() }

// SetKeys swaps in the trusted approver public keys.
func (c *Checker) SetKeys(k *approval.KeySet) { c.keys.Store(k) }

// Request is what a decision needs to know about the admission request besides the object.
type Request struct {
	Operation   string // CREATE, UPDATE, DELETE or CONNECT
	User        string
	Groups      []string
	DryRun      bool
	Name        string
	Namespace   string
	Resource    string // e.g. pods, jobs, serviceaccounts
	SubResource string // e.g. exec, token, resize
	// Options are the operation's options (DeleteOptions for a DELETE), as sent.
	Options map[string]any
}

// Decision is the outcome of an allowed request: warnings to show and, for audit, what was decided.
type Decision struct {
	Tool     string
	Warnings []string
	// ApprovalTokenIDs are the IDs of the approval tokens a Job consumed (checked, for a dry run), one per
	// approver.
	ApprovalTokenIDs []string
	// Cached is set when the Job's rendering was reused from the cache (rendering.go); for metrics only.
	Cached bool
}

func (c *Checker) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func (c *Checker) loaded() (*policy.Compiled, error) {
	p := c.policy.Load()
	if p == nil {
		return nil, deny(rules.PolicyNotLoaded, "the webhook has no valid policy yet; check its logs")
	}
	return p, nil
}

// invocation re-derives the call from the object's declared tool and parameters, exactly as the MCP
// server did, so scope and target namespace come from the policy and nothing else.
func invocation(p *policy.Compiled, labels, annotations map[string]string) (*policy.Invocation, error) {
	name, ok := labels[contract.LabelTool]
	if !ok || name == "" {
		return nil, deny(rules.NoToolLabel, "every Job in a sandbox namespace must carry the label %s naming a policy tool", contract.LabelTool)
	}
	t, err := p.Tool(name)
	if err != nil {
		return nil, deny(rules.UnknownTool, "tool %q is not in the policy (default deny)", name)
	}
	raw, ok := annotations[contract.AnnotationParams]
	if !ok {
		return nil, deny(rules.InvalidParameters, "annotation %s with the call's parameters is missing", contract.AnnotationParams)
	}
	params, err := decodeParams(raw)
	if err != nil {
		return nil, deny(rules.InvalidParameters, "annotation %s: %v", contract.AnnotationParams, err)
	}
	inv, err := t.Invoke(params)
	switch {
	case errors.Is(err, policy.ErrNamespaceDenied):
		return nil, deny(rules.NamespaceNotAllowed, "%v", err)
	case err != nil:
		return nil, deny(rules.InvalidParameters, "%v", err)
	}
	return inv, nil
}

func oneLine(s string) string { return oneline.Fold(s) }

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (c *Checker) isAdmin(r Request) bool {
	groups := c.Identities.AdminGroups
	if groups == nil {
		groups = DefaultAdminGroups
	}
	if contains(c.Identities.AdminUsers, r.User) {
		return true
	}
	for _, g := range r.Groups {
		if contains(groups, g) {
			return true
		}
	}
	return false
}
