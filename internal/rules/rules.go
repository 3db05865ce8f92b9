// Package rules is the registry of refusals: every rule that refuses something has one typed ID, a one-line
// doc, the README invariant it serves (README.md, "What holds even when the MCP server is bypassed") and
// where it is enforced. The Go-side rules (the webhook's checks, the Terraform allowlist, the MCP server's
// guardrails) are listed in All; the policy's CEL admission rules and plan rules are merged in from the
// policy by WithPolicy. docs/rules.md is generated from it (go run ./scripts/rulesdoc, make rules-docs).
//
// The IDs are the names the webhook puts in its denials ("agent-sandbox denied this: RULE: reason"), which
// the adversarial corpus and the webhook's metrics match on: an ID's value never changes.
package rules

import (
	"sort"

	"github.com/agent-sandbox/agent-sandbox/internal/policy"
)

// ID names a rule.
type ID string

// Where a rule is enforced.
const (
	EnforcedWebhook   = "webhook (Go)"
	EnforcedTfcheck   = "Terraform allowlist (internal/tfcheck)"
	EnforcedGuardrail = "MCP server guardrail (internal/service)"
	EnforcedCEL       = "admission (CEL)"
	EnforcedPlan      = "plan rules"
)

// Rule is one registered refusal.
type Rule struct {
	ID  ID
	Doc string
	// Invariant is the number of the README invariant the rule serves (1–13).
	Invariant int
	Enforced  string
}

// The webhook's Go checks.
const (
	PolicyNotLoaded       ID = "policy-not-loaded"
	NoToolLabel           ID = "no-tool-label"
	UnknownTool           ID = "unknown-tool"
	InvalidParameters     ID = "invalid-parameters"
	NamespaceNotAllowed   ID = "namespace-not-allowed"
	Decode                ID = "decode"
	Render                ID = "render"
	JobsOnly              ID = "jobs-only"
	PodsOnlyFromJobs      ID = "pods-only-from-jobs"
	OwnerJob              ID = "owner-job"
	OnePodPerJob          ID = "one-pod-per-job"
	Exact                 ID = "exact"
	ExactMetadata         ID = "exact-metadata"
	ExactImage            ID = "exact-image"
	ExactCommand          ID = "exact-command"
	ExactPodSpec          ID = "exact-pod-spec"
	ServiceAccount        ID = "service-account"
	JobShape              ID = "job-shape"
	Immutable             ID = "immutable"
	NoOrphans             ID = "no-orphans"
	ApprovalRequired      ID = "approval-required"
	ApprovalKeys          ID = "approval-keys"
	ApprovalLedger        ID = "approval-ledger"
	Approval              ID = "approval"
	AuditAnchor           ID = "audit-anchor"
	TokenRequest          ID = "token-request"
	MCPToken              ID = "mcp-token"
	SandboxNamespace      ID = "sandbox-namespace"
	ContentAddressed      ID = "content-addressed"
	PodBinding            ID = "pod-binding"
	PodStatus             ID = "pod-status"
	JobStatus             ID = "job-status"
	NoEviction            ID = "no-eviction"
	NoPodAccess           ID = "no-pod-access"
	NoEphemeralContainers ID = "no-ephemeral-containers"
	NoPodResize           ID = "no-pod-resize"
	SubresourceAllowlist  ID = "subresource-allowlist"
	WarmPool              ID = "warm-pool"
	Claim                 ID = "claim"
	ClaimExact            ID = "claim-exact"
	ClaimLedger           ID = "claim-ledger"
	ClaimReplayed         ID = "claim-replayed"
	ClaimStale            ID = "claim-stale"
	ClaimSignature        ID = "claim-signature"
	ClaimPending          ID = "claim-pending"
)

// The Terraform allowlist and the MCP server's guardrails.
const (
	// TerraformAllowlist: internal/tfcheck names no rule per refusal; every refusal is a tfcheck.Problem
	// (file:line,col: reason) of an error that matches tfcheck.ErrRefused.
	TerraformAllowlist ID = "terraform-allowlist"
	// RateLimited is service.KindRateLimited.
	RateLimited ID = "rate_limited"
	// ApprovalRequiredCall is service.KindApprovalRequired.
	ApprovalRequiredCall ID = "approval_required"
)

// All is every Go-side rule, in the order docs/rules.md lists them.
var All = []Rule{
	// Default deny.
	{PolicyNotLoaded, "The webhook has no valid policy yet: every sandbox Job is refused until one loads.", 7, EnforcedWebhook},
	{NoToolLabel, "A Job in a sandbox namespace carries the label naming a policy tool.", 1, EnforcedWebhook},
	{UnknownTool, "A tool not in the policy is refused (a Job, or a warm Job of it).", 1, EnforcedWebhook},
	{JobsOnly, "Other workload kinds are not allowed in a sandbox namespace; sandbox work runs only as agent-sandbox Jobs.", 1, EnforcedWebhook},
	{PodsOnlyFromJobs, "Pods in a sandbox namespace are created only by the Job controller, with a controlling Job owner.", 1, EnforcedWebhook},
	{SubresourceAllowlist, "A subresource use not on the webhook's allowlist (docs/admission.md) is refused, including ones a future Kubernetes adds.", 3, EnforcedWebhook},
	{NoPodAccess, "exec, attach, port-forward and proxy into a sandbox Pod are refused for everyone.", 1, EnforcedWebhook},
	{NoEphemeralContainers, "No ephemeral (debug) container is added to a sandbox Pod.", 1, EnforcedWebhook},
	{NoPodResize, "A sandbox Pod is not resized: its CPU and memory limits are the policy's.", 2, EnforcedWebhook},
	// The call's parameters and scope.
	{InvalidParameters, "The call's parameters annotation is present and valid for the tool's typed parameters.", 3, EnforcedWebhook},
	{NamespaceNotAllowed, "The call's target namespace is one the tool's policy allows.", 4, EnforcedWebhook},
	{Decode, "An object that cannot be decoded is refused.", 7, EnforcedWebhook},
	{Render, "A call the policy cannot render is refused.", 7, EnforcedWebhook},
	// Exactness.
	{Exact, "A sandbox Job or Pod equals what the policy renders (no status on a new Job; the Pod is named after its Job).", 3, EnforcedWebhook},
	{ExactMetadata, "The metadata (labels, annotations, request ID, audit head, UID) equals what the policy renders.", 3, EnforcedWebhook},
	{ExactImage, "Every container image equals the policy's.", 3, EnforcedWebhook},
	{ExactCommand, "Every container's command and args equal the policy's argv.", 3, EnforcedWebhook},
	{ExactPodSpec, "The pod spec equals, field by field, what the policy renders plus the API server's defaults.", 3, EnforcedWebhook},
	{ServiceAccount, "The Pod runs as the tool's ServiceAccount.", 3, EnforcedWebhook},
	{JobShape, "The Job's own spec (deadline, backoff, parallelism, …) equals what the policy renders.", 3, EnforcedWebhook},
	{Immutable, "A sandbox Job or Pod does not change after admission; no finalizer is added.", 3, EnforcedWebhook},
	{NoOrphans, "A sandbox Job is deleted with its Pod (propagationPolicy Background or Foreground), never orphaning it.", 3, EnforcedWebhook},
	{OwnerJob, "A sandbox Pod's owner is a live, unsuspended, unfinished Job the policy renders and the webhook admitted.", 3, EnforcedWebhook},
	{OnePodPerJob, "One admitted Job runs one Pod, once, whoever asks for a second.", 3, EnforcedWebhook},
	{PodBinding, "Only the scheduler binds sandbox Pods to nodes (pods/binding and the legacy bindings resource), and a Binding carries no labels or annotations (the API server would copy them onto the Pod) but the node's topology labels.", 3, EnforcedWebhook},
	{PodStatus, "A sandbox Pod's status is written by its node's kubelet and the cluster's controllers only, never its metadata.", 3, EnforcedWebhook},
	{JobStatus, "A sandbox Job's status is written by the Job controller only, never its metadata.", 3, EnforcedWebhook},
	{NoEviction, "A sandbox Pod that carries a call is not evicted; it ends by its own deadline.", 3, EnforcedWebhook},
	{SandboxNamespace, "The sandbox namespace, its labels, NetworkPolicies, quota, LimitRanges, ServiceAccounts and CA ConfigMaps are managed by the chart's identity only.", 3, EnforcedWebhook},
	{ContentAddressed, "Workspace and saved-plan ConfigMaps are immutable, named after their content and deleted only by the pruner.", 3, EnforcedWebhook},
	// Credentials' scope.
	{TokenRequest, "A tool ServiceAccount's token goes only to the kubelet, for the Vault audience, at most an hour, bound to a sandbox Pod of the tool on its node that the webhook admitted (owned by its existing Job, exactly that Job's rendering, in the webhook's Pod ledger); no token Secret.", 4, EnforcedWebhook},
	{MCPToken, "The MCP server's ServiceAccount token is minted only by the chart's identity, at most 24 h.", 3, EnforcedWebhook},
	// Approval.
	{ApprovalRequired, "A tool whose tier needs approval carries a human's signed approval token.", 5, EnforcedWebhook},
	{ApprovalKeys, "With no approver public key configured no approval is accepted.", 5, EnforcedWebhook},
	{ApprovalLedger, "An approval is used once: without the approval ledger none is accepted.", 5, EnforcedWebhook},
	{Approval, "An approval token verifies: signed by a trusted key, for this cluster, tool, parameters and plan, unexpired, unused.", 5, EnforcedWebhook},
	// Audit.
	{AuditAnchor, "Every admitted call's audit anchor is recorded in the API server, or the call is refused.", 8, EnforcedWebhook},
	// Warm Pods.
	{WarmPool, "Warm Jobs exist only for a tool with a warm pool and are created only by the webhook's pool controller.", 11, EnforcedWebhook},
	{Claim, "A claim is for a live warm Pod of its tool, with a valid request ID, audit head and parameters.", 11, EnforcedWebhook},
	{ClaimExact, "A claim adds only its annotation (and the webhook's signature) and renders exactly the policy's call.", 11, EnforcedWebhook},
	{ClaimLedger, "A claim is used once: without the claim ledger none is admitted.", 11, EnforcedWebhook},
	{ClaimReplayed, "A request ID claims one warm Pod, once.", 11, EnforcedWebhook},
	{ClaimStale, "A warm Pod that is not what the policy in force renders is not claimed; the pool replaces it.", 11, EnforcedWebhook},
	{ClaimSignature, "Only the webhook's mutating endpoint signs claims; a dry-run signature is never trusted.", 11, EnforcedWebhook},
	{ClaimPending, "A warm Pod takes no claim while another request's claim, admitted and anchored on the Pod as it is, may still be stored; the pool settles it.", 8, EnforcedWebhook},
	// Terraform.
	{TerraformAllowlist, "A workspace (HCL or JSON) and the configuration in a saved plan hold only what the allowlist admits: the mirrored kubernetes provider, no provisioners, exec plugins, external data, remote modules, backends or file functions.", 9, EnforcedTfcheck},
	// The MCP server's guardrails.
	{RateLimited, "A client that exhausts its audit budget is refused until the budget resets.", 8, EnforcedGuardrail},
	{ApprovalRequiredCall, "A call whose tier needs approval waits for a human's approval of this exact call.", 5, EnforcedGuardrail},
}

// WithPolicy is All followed by the policy's CEL admission rules (their doc is the rule's message) and its
// plan rules, each kind sorted by name.
func WithPolicy(p *policy.Policy) []Rule {
	out := append([]Rule(nil), All...)
	var cel, plan []Rule
	for _, r := range p.Spec.AdmissionRules {
		cel = append(cel, Rule{ID: ID(r.Name), Doc: r.Message, Invariant: celInvariant, Enforced: EnforcedCEL})
	}
	for _, r := range p.Spec.PlanRules {
		plan = append(plan, Rule{ID: ID(r.Name), Doc: r.Message, Invariant: 13, Enforced: EnforcedPlan})
	}
	for _, rs := range [][]Rule{cel, plan} {
		sort.Slice(rs, func(i, j int) bool { return rs[i].ID < rs[j].ID })
		out = append(out, rs...)
	}
	return out
}

// celInvariant: the policy's admission rules are the isolation invariant (gVisor, no host access, no
// privilege, limits, …).
const celInvariant = 2

// Lookup returns the rule of id among rs.
func Lookup(rs []Rule, id ID) (Rule, bool) {
	for _, r := range rs {
		if r.ID == id {
			return r, true
		}
	}
	return Rule{}, false
}

// Invariants are the short names of README.md's numbered invariants.
var Invariants = map[int]string{
	1:  "Default deny",
	2:  "Isolation",
	3:  "Exactness",
	4:  "Scope",
	5:  "Approval",
	6:  "Credentials",
	7:  "Fail closed",
	8:  "Audit",
	9:  "Terraform runs no code",
	10: "The approver sees the truth",
	11: "Warm Pods change nothing",
	12: "Target namespaces enforce Pod Security",
	13: "The policy judges what a plan does",
}
