// Package contract declares, once, the labels, annotations, ConfigMap names, volume names and paths that
// the MCP server's Job renderer, the admission webhook and the credential agent agree on. Anything that builds or checks a
// sandbox Job refers to these constants rather than spelling the strings again.
package contract

import "strings"

const prefix = "agent-sandbox.dev/"

// Labels on sandbox Jobs and their Pod templates.
const (
	// LabelTool names the policy tool a Job runs. A Job in a sandbox namespace without a known tool is denied.
	LabelTool = prefix + "tool"
	// LabelRequestID correlates the Job with the MCP call and the audit trail.
	LabelRequestID = prefix + "request-id"
	// LabelSandboxNamespace marks a namespace whose Jobs and Pods the webhook guards (value "true").
	LabelSandboxNamespace = prefix + "sandbox"
	// LabelApprovalLedger marks the ConfigMaps that record used approval token IDs.
	LabelApprovalLedger = prefix + "approval-ledger"
	// LabelAuditAnchor marks the ConfigMaps in the webhook's namespace that record audit anchors (value
	// "true"): one per admitted call, read by `agent-sandbox audit verify --against-cluster`.
	LabelAuditAnchor = prefix + "audit-anchor"
	// LabelAuditAnchorVoid marks the ConfigMaps in the webhook's namespace with which the warm pool voids an
	// anchor (value "true"): the claim it records was admitted but never stored (docs/design/audit-anchors.md).
	LabelAuditAnchorVoid = prefix + "audit-anchor-void"
	// LabelClaimedPod, on the anchor of a warm claim and on its void mark, is the UID of the claimed Pod: what
	// the pool and the claim's admission look the Pod's anchors up by.
	LabelClaimedPod = prefix + "claimed-pod"
	// LabelWarm marks a warm Job and its Pod (value "true"): started before any call, holding no credential,
	// waiting for one claim (docs/design/warm-pool.md).
	LabelWarm = prefix + "warm"
)

// Annotations on sandbox Jobs and their Pod templates.
const (
	// AnnotationParams holds the canonical JSON of the call's parameters; the webhook renders the command
	// from it and compares it with the container's.
	AnnotationParams = prefix + "params"
	// AnnotationApprovalToken holds the signed approvals for tools that need them: one approval token, or,
	// for a call that needs several approvers, their tokens joined by ApprovalTokenSeparator
	// (JoinApprovalTokens).
	AnnotationApprovalToken = prefix + "approval-token"
	// AnnotationAuditHead, on a call's Job, holds the head of the MCP server's audit chain when it created
	// the Job: the hex SHA-256 of the last line of its audit log, 64 lowercase hex digits. The webhook
	// admits a call's Job only with one, and records it with the request ID as an audit anchor outside
	// the MCP host. It is on the Job only, not on its pod template: the Pod has no use for it, and a value
	// that differs per call in the Pod's annotations would change what the admission rules see of every
	// Pod of one rendering. A warm Pod's claim carries the head in its own field instead.
	AnnotationAuditHead = prefix + "audit-head"
	// AnnotationInjected marks a pod template the webhook has already mutated; mutation is idempotent.
	AnnotationInjected = prefix + "injected"
	// AnnotationClaim, on a warm Pod, holds the one call it serves (a Claim as JSON). It is added once, by an
	// UPDATE the webhook validates like a call's Job, and never changes afterwards; the kubelet delivers it
	// into the Pod through the ClaimVolume.
	AnnotationClaim = prefix + "claim"
	// AnnotationClaimSignature, on a claimed warm Pod, is the admission webhook's Ed25519 signature over the
	// claim bound to this Pod (namespace, name, UID) and the claim's request ID (sandbox.SignClaim). Only the
	// webhook's mutating endpoint writes it, in the same UPDATE as the claim, overwriting any value the
	// client sent; the warm Pod's entry point and credential agent run and mint nothing without a valid one,
	// so a claim that reached the Pod any other way (the pods/status subresource, which admission of pods
	// does not see) is refused inside the Pod.
	AnnotationClaimSignature = prefix + "claim-signature"
)

// WebhookMutateJobs is the name of the mutating webhook of sandbox Jobs in the chart's configuration. The
// API server calls every mutating webhook before any validating one, so a create refused by this one, or
// failing to call it, never reached the validating webhook that records approval tokens: the MCP server
// gives such a call's approval back (sandbox.ApprovalsUnused).
const WebhookMutateJobs = "jobs.mutate.agent-sandbox.dev"

// Content-addressed ConfigMaps of the sandbox namespace, which the MCP server uploads: the admission
// webhook admits one of these names only with the content it names, immutable, so a name means one
// content for ever, and the content garbage collector deletes them once no approval can name them.
const (
	// WorkspaceConfigMapPrefix starts a workspace ConfigMap's name; sandbox.WorkspaceConfigMapName gives
	// the rest.
	WorkspaceConfigMapPrefix = "tfws-"
	// PlanConfigMapPrefix starts a saved plan's ConfigMap name, followed by the plan's SHA-256 (its plan ID).
	PlanConfigMapPrefix = "tfplan-"
)

// Names inside the sandbox Pod.
const (
	// ToolContainer is the name of the container that runs the tool.
	ToolContainer = "tool"
	// CredentialAgentContainer is the injected native sidecar (an init container with restartPolicy Always).
	CredentialAgentContainer = "cred-agent"
	// CheckContainer is the init container that checks a tool's input (a Terraform workspace or saved
	// plan) before the credential agent starts: a refused input never gets a credential.
	CheckContainer = "check"
	// CredentialVolume is the memory-backed emptyDir that holds the minted kubeconfig.
	CredentialVolume = "agent-sandbox-credentials"
	// VaultTokenVolume is the projected service-account token (Vault audience), mounted only in the sidecar.
	VaultTokenVolume = "agent-sandbox-vault-token"
	// VaultCAVolume and APIServerCAVolume carry CA bundles into the sidecar.
	VaultCAVolume     = "agent-sandbox-vault-ca"
	APIServerCAVolume = "agent-sandbox-apiserver-ca"
	// WorkspaceVolume is the read-only ConfigMap of caller-supplied input files, for tools that take one.
	WorkspaceVolume = "workspace"
	// TmpVolume is a small writable emptyDir at /tmp: root filesystems are read-only.
	TmpVolume = "tmp"
	// ResultVolume is the memory-backed emptyDir the tool writes its result into (read-write in the tool,
	// read-only in the credential agent, which reports it on its own output stream).
	ResultVolume = "agent-sandbox-result"
	// PlanVolume is the read-only ConfigMap of a saved plan, for tools that apply one.
	PlanVolume = "plan"
	// ClaimVolume is a warm Pod's read-only downward-API volume that exposes AnnotationClaim as a file.
	ClaimVolume = "agent-sandbox-claim"
)

// Paths inside the sandbox Pod.
const (
	CredentialDir  = "/var/run/agent-sandbox/credentials"
	KubeconfigPath = CredentialDir + "/kubeconfig"
	VaultTokenDir  = "/var/run/agent-sandbox/vault"
	VaultTokenPath = VaultTokenDir + "/token"
	VaultCADir     = "/var/run/agent-sandbox/vault-ca"
	APIServerCADir = "/var/run/agent-sandbox/apiserver-ca"
	TmpDir         = "/tmp"
	ResultDir      = "/var/run/agent-sandbox/result"
	// ResultPath is where a tool writes its one JSON result object.
	ResultPath = ResultDir + "/result.json"
	// DonePath is where a warm Pod's agent marks that the claimed tool has exited: the credential agent then
	// revokes and reports the result at once, without waiting for the kubelet to notice.
	DonePath = ResultDir + "/done"
	// ClaimDir and ClaimPath: where a warm Pod reads its claim.
	ClaimDir  = "/var/run/agent-sandbox/claim"
	ClaimPath = ClaimDir + "/claim"
	// The other files of a warm Pod's claim volume, next to ClaimPath: the claim's signature
	// (AnnotationClaimSignature) and the Pod's own identity, which the signature is bound to.
	ClaimSignatureFile = "claim-signature"
	PodNamespaceFile   = "pod-namespace"
	PodNameFile        = "pod-name"
	PodUIDFile         = "pod-uid"
)

// BinaryPath is where the project's image holds the agent-sandbox binary.
const BinaryPath = "/agent-sandbox"

// RunsTool reports whether args — a command line after its program — name one of the binary's tool
// runners: `run <tool> ...`, not `run warm` (the warm entry point), not a flag. Such a runner waits for the
// credential agent's kubeconfig itself, and in a warm Pod runs inside the entry point's process.
func RunsTool(args []string) bool {
	return len(args) >= 2 && args[0] == "run" && args[1] != "warm" && !strings.HasPrefix(args[1], "-")
}

// ApprovalTokenSeparator joins the approval tokens of one call in AnnotationApprovalToken and in a warm Pod's
// claim. Approval tokens are JWS compact serializations, base64url and dots, so none contains it.
const ApprovalTokenSeparator = ","

// JoinApprovalTokens is the AnnotationApprovalToken value for tokens: a single token is itself, and no
// token is the empty value (no annotation).
func JoinApprovalTokens(tokens []string) string { return strings.Join(tokens, ApprovalTokenSeparator) }

// SplitApprovalTokens reads an AnnotationApprovalToken value back into its tokens, exactly as written: an
// empty value is no token, and an empty part stays, for the verifier to refuse.
func SplitApprovalTokens(value string) []string {
	if value == "" {
		return nil
	}
	return strings.Split(value, ApprovalTokenSeparator)
}
