// Package policy is the agent-sandbox policy model: which tools exist, what each may run, with which
// credential scope, against which namespaces, and which admission rules every sandbox Job and Pod must pass.
//
// The policy is default-deny: a tool that is not declared does not exist, for the MCP server and for the
// admission webhook alike. Both load the same file, so the server's early refusals and the webhook's
// enforcement cannot drift apart. The scope and target namespace of a call are derived here from the tool
// and its validated parameters, never taken from the caller.
package policy

import (
	"encoding/json"
	"regexp"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agent-sandbox/agent-sandbox/internal/schema"
)

// APIVersion and Kind identify the policy document format.
const (
	APIVersion = "agent-sandbox.dev/v1alpha1"
	Kind       = "SandboxPolicy"
)

// Tier says how much a tool can change: read looks, plan computes a change without making it, apply makes it.
type Tier string

// The tiers, from least to most dangerous.
const (
	TierRead  Tier = "read"
	TierPlan  Tier = "plan"
	TierApply Tier = "apply"
)

// ParameterType is the type of one tool parameter.
type ParameterType string

// The parameter types. There is deliberately no free-form object or list type: every value ends up in an
// argv element, so it must be a scalar that a pattern can constrain.
const (
	TypeString  ParameterType = "string"
	TypeInteger ParameterType = "integer"
	TypeBoolean ParameterType = "boolean"
)

// Policy is the whole policy document.
type Policy struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Metadata   Metadata `json:"metadata"`
	Spec       Spec     `json:"spec"`
}

// Metadata names the policy.
type Metadata struct {
	Name string `json:"name"`
}

// Spec is the body of the policy.
type Spec struct {
	// ClusterID names the cluster this policy guards. Approval tokens are addressed to it (their audience),
	// so a token minted for one cluster is refused by every other.
	ClusterID string `json:"clusterID"`
	// Sandbox holds the settings every sandbox Job shares.
	Sandbox Sandbox `json:"sandbox"`
	// Approval holds the approval token and request lifetimes.
	Approval Approval `json:"approval,omitempty"`
	// Scopes are the credential scopes Vault can mint, by name.
	Scopes []Scope `json:"scopes"`
	// Tools are the only commands an agent can run.
	Tools []Tool `json:"tools"`
	// DestructiveSignals are patterns that mark plan output as destructive, shown to the approver.
	DestructiveSignals []Signal `json:"destructiveSignals,omitempty"`
	// AdmissionRules are CEL expressions every sandbox Job and Pod must satisfy.
	AdmissionRules []AdmissionRule `json:"admissionRules"`
	// PlanRules are CEL expressions every resource change of a Terraform plan must satisfy, whatever
	// approval it carries: evaluated in the plan sandbox (a refused plan is never saved), by `agent-sandbox
	// approve` (which refuses to sign) and in the apply sandbox's check container, before any credential
	// exists (plan_rules.go).
	PlanRules []PlanRule `json:"planRules,omitempty"`
}

// Sandbox holds the settings shared by every sandbox Job.
type Sandbox struct {
	// Namespace is where sandbox Jobs run.
	Namespace string `json:"namespace"`
	// RuntimeClassName is the RuntimeClass every sandbox Pod must use (gVisor).
	RuntimeClassName string `json:"runtimeClassName"`
	// MaxDeadline bounds every tool's deadline (the Job's activeDeadlineSeconds).
	MaxDeadline metav1.Duration `json:"maxDeadline"`
	// NodeSelector and Tolerations are added to every sandbox Pod and required by admission, e.g.
	// sandbox.gke.io/runtime=gvisor on GKE.
	NodeSelector map[string]string   `json:"nodeSelector,omitempty"`
	Tolerations  []corev1.Toleration `json:"tolerations,omitempty"`
	// RunAsUser is the non-root UID sandbox containers run as.
	RunAsUser int64 `json:"runAsUser,omitempty"`
	// CredentialAgent describes the sidecar the webhook injects to fetch the credential.
	CredentialAgent CredentialAgent `json:"credentialAgent"`
}

// CredentialAgent describes the injected credential sidecar and how it reaches Vault and the API server.
type CredentialAgent struct {
	// Image runs the credential agent; it is the agent-sandbox image.
	Image string `json:"image"`
	// VaultAddress is Vault's URL as seen from a sandbox Pod.
	VaultAddress string `json:"vaultAddress"`
	// VaultCACertConfigMap, when set, names a ConfigMap in the sandbox namespace with key ca.crt that holds
	// the CA for VaultAddress.
	VaultCACertConfigMap string `json:"vaultCACertConfigMap,omitempty"`
	// VaultAudience is the audience of the projected service-account token the agent logs in with.
	VaultAudience string `json:"vaultAudience,omitempty"`
	// VaultAuthMount and VaultSecretsMount are the mount paths of Vault's Kubernetes auth method (it checks
	// every login with the API server's TokenReview, so a deleted Pod's token is refused) and Kubernetes
	// secrets engine.
	VaultAuthMount    string `json:"vaultAuthMount,omitempty"`
	VaultSecretsMount string `json:"vaultSecretsMount,omitempty"`
	// VaultNamespace, when set, is the Vault Enterprise / HCP Vault namespace (for example admin/team-a)
	// that holds both mounts: the agent sends it with every request (X-Vault-Namespace), and
	// `vault configure` configures that namespace. Empty is the root namespace (Vault OSS).
	VaultNamespace string `json:"vaultNamespace,omitempty"`
	// APIServer is the URL the minted credential is used against, as seen from a sandbox Pod.
	APIServer string `json:"apiServer"`
	// APIServerCACertConfigMap names a ConfigMap in the sandbox namespace with key ca.crt (default
	// kube-root-ca.crt, which Kubernetes creates in every namespace).
	APIServerCACertConfigMap string `json:"apiServerCACertConfigMap,omitempty"`
	// Resources are the sidecar's CPU and memory (requests = limits).
	Resources Resources `json:"resources,omitempty"`
}

// Approval holds lifetimes of approval requests and tokens.
type Approval struct {
	// TokenTTL is the longest a signed approval may stay valid (default and maximum 30m). The admission
	// webhook refuses a token whose lifetime (issue to expiry) is longer, and `agent-sandbox approve` signs
	// for this long unless the approver asks for less.
	TokenTTL metav1.Duration `json:"tokenTTL,omitempty"`
	// RequestTTL is how long a pending request waits for a human (default 24h).
	RequestTTL metav1.Duration `json:"requestTTL,omitempty"`
}

// Scope is one credential scope: the RBAC rules of the Role that Vault creates per request.
type Scope struct {
	Name string `json:"name"`
	// TTL of the minted service-account token; Kubernetes refuses less than 10 minutes.
	TTL   metav1.Duration `json:"ttl,omitempty"`
	Rules []Rule          `json:"rules"`
}

// Rule is one RBAC policy rule.
type Rule struct {
	APIGroups     []string `json:"apiGroups"`
	Resources     []string `json:"resources"`
	Verbs         []string `json:"verbs"`
	ResourceNames []string `json:"resourceNames,omitempty"`
}

// Tool is one command an agent may run. The policy is the tool catalogue: the MCP server offers exactly these
// tools, with input schemas, output schemas, titles and annotations derived from their declarations, and the
// admission webhook enforces the Job each call renders to.
type Tool struct {
	Name string `json:"name"`
	// Title is the tool's name for people (the MCP title); default: the name with spaces for '_'.
	Title       string `json:"title,omitempty"`
	Description string `json:"description"`
	Tier        Tier   `json:"tier"`
	// Hints say what the tool does to its environment, for the agent and its user (the MCP annotations).
	// The tier sets them by default and a hint may not contradict it.
	Hints Hints `json:"hints,omitempty"`
	// RequiresApproval makes the tool wait for a signed human approval. Always true for the apply tier,
	// whatever the file says.
	RequiresApproval bool `json:"requiresApproval,omitempty"`
	// Scope names the credential scope the tool's Job receives.
	Scope string `json:"scope"`
	// Namespaces are the namespaces the tool may target.
	Namespaces []string `json:"namespaces"`
	// NamespaceParameter names the parameter that carries the target namespace. Without it the tool
	// always targets Namespaces[0], which must then be the only entry.
	NamespaceParameter string `json:"namespaceParameter,omitempty"`
	// ServiceAccount is the sandbox-namespace ServiceAccount the tool's Pod runs as; Vault's login role
	// is bound to it, so no two tools share one, and none is the namespace's "default". Default: "tool-" +
	// the name with '_' replaced by '-'.
	ServiceAccount string `json:"serviceAccount,omitempty"`
	// Image runs the tool.
	Image string `json:"image"`
	// Command is the argv template; "{{name}}" is replaced by the parameter's value. An element that
	// names an optional parameter that was not given is left out.
	Command    []string    `json:"command"`
	Parameters []Parameter `json:"parameters,omitempty"`
	// Deadline bounds the tool's run (the Job's activeDeadlineSeconds).
	Deadline  metav1.Duration `json:"deadline"`
	Resources Resources       `json:"resources"`
	// PlanDigestParameter names the parameter that carries the digest of a saved plan this tool applies;
	// an approval for the tool is then bound to that digest as well.
	PlanDigestParameter string `json:"planDigestParameter,omitempty"`
	// Workspace, when set, mounts a ConfigMap of input files that the caller supplies (for example a
	// Terraform configuration). Its name must match the pattern and it is mounted read-only. The
	// admission webhook admits only immutable workspace ConfigMaps named by their content's hash.
	Workspace *Workspace `json:"workspace,omitempty"`
	// Plan, when set, mounts the saved plan whose ID (its SHA-256) the parameter carries: the immutable
	// ConfigMap tfplan-<plan ID> that the MCP server stored after the plan ran, read-only.
	Plan *Workspace `json:"plan,omitempty"`
	// Check, when set, is the argv template of a check that runs in an init container (the tool's image
	// and resources) before the credential agent starts: it inspects the tool's inputs, and if it exits
	// non-zero the Pod stops there, before any credential exists. Its termination message is the reason.
	Check []string `json:"check,omitempty"`
	// Result says what the tool's one JSON result object holds and how the MCP server decodes, checks and
	// summarises it.
	Result Result `json:"result"`
	// WarmPool, when set, keeps Pods of this tool started before any call (docs/design/warm-pool.md): each
	// waits, holding no credential, for one claim the webhook validates like a call's Job, serves that one
	// call and is replaced. Only tools whose Pod needs nothing per call (no workspace, plan or check) and
	// that run in the agent-sandbox image (whose warm entry point executes the claimed argv) can have one.
	WarmPool *WarmPool `json:"warmPool,omitempty"`

	// resultSchema is Result.Schema, compiled by Compile (json results only).
	resultSchema *schema.Schema
	// planRules are the policy's plan rules, rendered as JSON for the {{plan_rules}} placeholder (a pointer,
	// like resultSchema, so that a decoded policy compares equal to another).
	planRules *PlanRuleSet
}

// Hints are the MCP tool annotations, declared in the policy so that they are reviewed with the tool. Nil
// means the tier's default (see DefaultHints).
type Hints struct {
	// ReadOnly: the tool changes nothing, neither in the cluster nor anywhere else (a saved plan counts).
	ReadOnly *bool `json:"readOnly,omitempty"`
	// Destructive: the tool may delete or overwrite (meaningful only when not read-only).
	Destructive *bool `json:"destructive,omitempty"`
	// Idempotent: calling it again with the same arguments has no further effect.
	Idempotent *bool `json:"idempotent,omitempty"`
	// OpenWorld: the tool reaches beyond the cluster and its own sandbox (the internet, other services).
	OpenWorld *bool `json:"openWorld,omitempty"`
}

// ResultKind names how a tool's result is decoded and summarised by the MCP server.
type ResultKind string

// The result kinds.
const (
	// ResultJSON is one JSON object that must validate against the tool's Result.Schema; it is returned to
	// the agent as the structured result.
	ResultJSON ResultKind = "json"
	// ResultText is {"text": "..."}: the text is returned, cut to Result.MaxBytes.
	ResultText ResultKind = "text"
	// ResultTerraformPlan is `run terraform-plan`'s result: the saved plan is stored for terraform_apply
	// and the plan is scanned for the policy's destructive signals.
	ResultTerraformPlan ResultKind = "terraform-plan"
	// ResultTerraformApply is `run terraform-apply`'s result.
	ResultTerraformApply ResultKind = "terraform-apply"
)

// ResultKinds lists every result kind.
var ResultKinds = []ResultKind{ResultJSON, ResultText, ResultTerraformPlan, ResultTerraformApply}

// Result describes a tool's result.
type Result struct {
	Kind ResultKind `json:"kind"`
	// Schema is the JSON Schema of a json result: an object schema in the vocabulary of package schema. The
	// MCP server publishes it as the tool's outputSchema (with the call's request_id added) and refuses a
	// result that does not validate.
	Schema json.RawMessage `json:"schema,omitempty"`
	// MaxBytes bounds the result (default DefaultResultBytes, at most MaxResultBytes). A json result
	// beyond it is refused; a text result is cut.
	MaxBytes int `json:"maxBytes,omitempty"`
}

// WarmPool sizes a tool's pool of warm Pods.
type WarmPool struct {
	// Min is how many unclaimed warm Pods the pool keeps ready.
	Min int `json:"min"`
	// Max bounds the tool's warm Jobs at any time, claimed ones included (default Min+1).
	Max int `json:"max,omitempty"`
	// IdleTimeout is how long a warm Pod waits for a claim before it exits and is replaced (default 10m).
	IdleTimeout metav1.Duration `json:"idleTimeout,omitempty"`
}

// Workspace describes a read-only ConfigMap mount named by a parameter.
type Workspace struct {
	// Parameter names the tool parameter that carries the ConfigMap's name.
	Parameter string `json:"parameter"`
	// From names the parameter that picks the workspace: a folder of the MCP server's workspace directory,
	// which the server publishes as the ConfigMap and fills Parameter with (workspaces only, not plans).
	From string `json:"from,omitempty"`
	// MountPath is where the files appear in the tool container.
	MountPath string `json:"mountPath"`
}

// Parameter is one typed tool parameter.
type Parameter struct {
	Name        string        `json:"name"`
	Type        ParameterType `json:"type"`
	Description string        `json:"description,omitempty"`
	Required    bool          `json:"required,omitempty"`
	// Pattern is an RE2 expression the whole value must match (it is anchored). Required for strings.
	Pattern string `json:"pattern,omitempty"`
	// MaxLength bounds a string value (default 256).
	MaxLength int `json:"maxLength,omitempty"`
	// Minimum and Maximum bound an integer value.
	Minimum *int64 `json:"minimum,omitempty"`
	Maximum *int64 `json:"maximum,omitempty"`
	// Default is used when an optional parameter is not given.
	Default any `json:"default,omitempty"`
	// Enum lists the only values a string parameter may take (each must also match Pattern).
	Enum []string `json:"enum,omitempty"`
	// FilledBy marks a parameter the MCP server fills in itself; the agent never sees or gives it.
	FilledBy FilledBy `json:"filledBy,omitempty"`

	// re is Pattern, anchored and compiled once by Compile.
	re *regexp.Regexp
}

// FilledBy names what the MCP server fills a parameter with.
type FilledBy string

// FilledByWorkspace is the name of the content-addressed ConfigMap the server publishes a workspace
// folder as (the tool's Workspace.Parameter).
const FilledByWorkspace FilledBy = "workspace"

// Resources are CPU and memory limits. The memory request equals the limit; the CPU request is CPURequest
// when set, the limit otherwise.
//
// A gVisor sandbox runs its whole kernel inside the Pod's CPU quota (the sum of its containers' limits), so a
// small CPU limit makes every step of a call slow — the sandbox's boot, the Go runtime of the tool, its TLS
// handshakes. A small CPURequest with a larger limit lets a short call burst on an idle node while the
// scheduler still packs many sandboxes per node; the limit still bounds what one sandbox can take.
type Resources struct {
	CPU    resource.Quantity `json:"cpu,omitempty"`
	Memory resource.Quantity `json:"memory,omitempty"`
	// CPURequest is what the scheduler reserves (default: CPU). It must be more than 0 and at most CPU.
	CPURequest *resource.Quantity `json:"cpuRequest,omitempty"`
}

// Signal is a named pattern over plan output that marks it destructive.
type Signal struct {
	Name        string `json:"name"`
	Pattern     string `json:"pattern"`
	Description string `json:"description,omitempty"`
}

// PlanRule is one CEL rule evaluated on every resource change of a Terraform plan. Its variables are
// described in package cel (VarChange, VarPodSpecs, ...): Terraform's attribute names, null attributes
// absent, values known only after apply the string "(known after apply)" — so write rules as allowlists.
type PlanRule struct {
	Name string `json:"name"`
	// Expression is true when the change is acceptable.
	Expression string `json:"expression"`
	// Message says what is wrong with a change the expression refuses, on one line.
	Message string `json:"message"`
	// Approvals, when 2 or more, makes this a two-person rule: a change the expression refuses is not
	// refused but needs this many distinct approvers. Absent (or 1): the change is refused.
	Approvals int `json:"approvals,omitempty"`
}

// AdmissionRule is one CEL rule evaluated on every sandbox Job and Pod.
type AdmissionRule struct {
	Name       string `json:"name"`
	Expression string `json:"expression"`
	Message    string `json:"message"`
}
