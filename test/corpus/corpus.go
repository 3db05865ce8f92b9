// Package corpus is the adversarial admission corpus: one safe sandbox Job and, for every way to break the
// invariants, one unsafe object or action, each submitted DIRECTLY to the API server (or to Vault) as
// someone who bypasses the MCP server would — with the MCP server's own identity, as an ordinary `edit`
// user of the sandbox namespace, as a cluster-wide administrator who is not the chart's identity (with what
// admission can decide: its rights to remove the webhook itself are out of reach of any webhook, see
// docs/admission.md), or posing as the Job controller. The integration tests run it against a real kube-apiserver and Vault with
// the webhook registered; `make verify` runs the same corpus against the live cluster.
//
// The cases that are pure data — unsafe Jobs, Pods, approvals and changes to admitted objects — are declared
// in test/corpus/cases, which the webhook's and the CEL rules' unit tests decide as well; this package turns
// them into requests and adds the cases that need a cluster (other identities, subresources, Vault, setups).
package corpus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/test/corpus/cases"
	"github.com/agent-sandbox/agent-sandbox/webhook"
)

// Env is what the corpus needs: the policy the webhook enforces, an approver key it trusts, the
// identities that attack, and Vault.
type Env struct {
	Policy   *policy.Compiled
	Approver *approval.PrivateKey
	// Other is an approver key the webhook does NOT trust.
	Other *approval.PrivateKey
	// Second is another approver key the webhook trusts, for the plans that need two approvers. Without it
	// the corpus leaves out the cases that need two distinct approvers' tokens admitted.
	Second *approval.PrivateKey
	// Identities attack; Admin sets up and cleans up.
	*Identities
	// Vault is where the Vault-direct cases log in.
	Vault VaultTarget
	// Run distinguishes object names between runs against the same cluster.
	Run string
	// FinishJob makes the Job's Pod finish (on a live cluster: waits for it to; without a kubelet: marks
	// the Pod Succeeded through its status, as a kubelet would, and lets the Job controller react).
	FinishJob func(ctx context.Context, job *batchv1.Job) error

	mu      sync.Mutex
	created []string // Jobs admitted for real, for Cleanup
}

// Namespace is the sandbox namespace under test.
func (e *Env) Namespace() string { return e.Policy.Spec.Sandbox.Namespace }

// PodParams are valid parameters of the read tool.
func PodParams() map[string]any { return cases.PodParams() }

// ApplyParams are valid terraform_apply parameters for a made-up plan.
func ApplyParams() map[string]any { return cases.ApplyParams() }

// AuditHead is the audit chain head the corpus's Jobs and claims carry: well-formed, so that each case is
// refused (or admitted) for the reason it names. The corpus writes no audit log, so the anchors the webhook
// records for its admitted Jobs belong to no log: `audit verify --against-cluster` after a corpus run must
// be scoped (--since) to calls made after it.
const AuditHead = "c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00"

// Job renders the Job the MCP server would submit for tool and params (before the webhook's injection). token
// is the approval-token annotation: one token, or several joined (contract.JoinApprovalTokens).
func (e *Env) Job(tool string, params map[string]any, token string) *batchv1.Job {
	inv := e.invocation(tool, params)
	id, err := approval.NewRequestID()
	if err != nil {
		panic(err)
	}
	j, err := sandbox.RenderJob(e.Policy, sandbox.JobSpec{Invocation: inv, RequestID: id, ApprovalTokens: contract.SplitApprovalTokens(token), AuditHead: AuditHead})
	if err != nil {
		panic(err)
	}
	return j
}

func (e *Env) invocation(tool string, params map[string]any) *policy.Invocation {
	t, err := e.Policy.Tool(tool)
	if err != nil {
		panic(err)
	}
	inv, err := t.Invoke(params)
	if err != nil {
		panic(err)
	}
	return inv
}

// Injected renders the Job as it looks after the webhook's injection, to tamper with the sidecar.
func (e *Env) Injected(tool string, params map[string]any) *batchv1.Job {
	j := e.Job(tool, params, "")
	webhook.Inject(&j.Spec.Template.ObjectMeta, &j.Spec.Template.Spec, e.Policy, e.invocation(tool, params))
	return j
}

// Token signs an approval as `agent-sandbox approve` would; mut changes the claims before signing.
func (e *Env) Token(key *approval.PrivateKey, tool string, params map[string]any, mut func(*approval.Claims)) string {
	inv := e.invocation(tool, params)
	hash, err := approval.ParamsHash(tool, inv.Params)
	if err != nil {
		panic(err)
	}
	id, _ := approval.NewRequestID()
	req := &approval.Request{ID: id, Tool: tool, ParamsHash: hash, Namespace: inv.TargetNamespace, PlanDigest: inv.PlanDigest}
	c, err := approval.NewClaims(req, key.KeyID(), e.Policy.Spec.ClusterID, time.Now(), 0)
	if err != nil {
		panic(err)
	}
	if mut != nil {
		mut(&c)
	}
	tok, err := approval.Sign(key, c)
	if err != nil {
		panic(err)
	}
	return tok
}

// Case is one unsafe object or action; Submit must be refused with a message naming Rule (and saying Says,
// when set). A Rule that starts with "vault:" is a refusal by Vault rather than by the admission webhook.
type Case struct {
	// Class groups cases in reports: isolation, exactness, placement, job-shape, update, pod, subresource,
	// token-request, vault, namespace, protected, configmap, workload, approval.
	Class string
	Name  string
	Rule  string
	Says  string
	// Submit performs the action and returns the API server's (or Vault's) answer.
	Submit func(ctx context.Context) error
}

// Outcome of one case.
type Outcome struct {
	Case   Case
	Err    error
	Passed bool
}

// Run submits every case and reports whether each was refused with its rule named.
func Run(ctx context.Context, list []Case) []Outcome {
	out := make([]Outcome, len(list))
	for i, c := range list {
		err := c.Submit(ctx)
		out[i] = Outcome{Case: c, Err: err, Passed: Refused(err, c.Rule) && strings.Contains(err.Error(), c.Says)}
	}
	return out
}

// Refused reports whether err is an admission refusal by agent-sandbox naming rule, or, for a "vault:"
// rule, Vault refusing a login.
func Refused(err error, rule string) bool {
	if err == nil {
		return false
	}
	if r, ok := strings.CutPrefix(rule, "vault:"); ok {
		var lr *LoginRefused
		return errors.As(err, &lr) && strings.Contains(lr.Error(), r)
	}
	msg := err.Error()
	return strings.Contains(msg, "agent-sandbox denied this") && strings.Contains(msg, rule)
}

// CreateJob creates a Job in the sandbox namespace as the attacker (dry-run when dryRun).
func (e *Env) CreateJob(ctx context.Context, j *batchv1.Job, dryRun bool) (*batchv1.Job, error) {
	return e.createJobAs(ctx, e.Attacker, j, dryRun)
}

func (e *Env) createJobAs(ctx context.Context, c kubernetes.Interface, j *batchv1.Job, dryRun bool) (*batchv1.Job, error) {
	opts := metav1.CreateOptions{}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	out, err := c.BatchV1().Jobs(e.Namespace()).Create(ctx, j, opts)
	if err == nil && !dryRun {
		e.mu.Lock()
		e.created = append(e.created, out.Name)
		e.mu.Unlock()
	}
	return out, err
}

// Cleanup deletes every Job the corpus got admitted (on a live cluster they would otherwise stay).
func (e *Env) Cleanup(ctx context.Context) {
	e.mu.Lock()
	names := e.created
	e.created = nil
	e.mu.Unlock()
	bg := metav1.DeletePropagationBackground
	for _, n := range names {
		_ = e.Admin.BatchV1().Jobs(e.Namespace()).Delete(ctx, n, metav1.DeleteOptions{PropagationPolicy: &bg})
	}
}

// Race creates n Jobs with one approval token at once and returns how many were admitted.
func (e *Env) Race(ctx context.Context, n int) (admitted int, errs []error) {
	tok := e.Token(e.Approver, "terraform_apply", ApplyParams(), nil)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			_, err := e.CreateJob(ctx, e.Job("terraform_apply", ApplyParams(), tok), false)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				admitted++
			} else {
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	return admitted, errs
}

// DryRunThenCreate submits a Job with a good token as a server-side dry run twice, then for real: the dry
// runs must consume nothing.
func (e *Env) DryRunThenCreate(ctx context.Context) error {
	tok := e.Token(e.Approver, "terraform_apply", ApplyParams(), nil)
	for i := range 2 {
		if _, err := e.CreateJob(ctx, e.Job("terraform_apply", ApplyParams(), tok), true); err != nil {
			return fmt.Errorf("dry run %d refused: %w", i+1, err)
		}
	}
	if _, err := e.CreateJob(ctx, e.Job("terraform_apply", ApplyParams(), tok), false); err != nil {
		return fmt.Errorf("real create after two dry runs refused: %w", err)
	}
	return nil
}

// SafeJob creates the safe Job (server-side dry run when dryRun) with the MCP server's identity and
// checks that it was admitted and that the webhook injected the credential agent.
func (e *Env) SafeJob(ctx context.Context, dryRun bool) (*batchv1.Job, error) {
	j, err := e.createJobAs(ctx, e.MCP, e.Job("k8s_get_pod_status", PodParams(), ""), dryRun)
	if err != nil {
		return nil, fmt.Errorf("the safe Job was refused: %w", err)
	}
	s := j.Spec.Template.Spec
	if j.Spec.Template.Annotations[contract.AnnotationInjected] != "true" || len(s.InitContainers) != 1 || s.InitContainers[0].Name != contract.CredentialAgentContainer {
		return j, errors.New("the safe Job was admitted but the credential agent was not injected")
	}
	return j, nil
}

// WaitForPod waits until the Job controller has created the Job's Pod.
func (e *Env) WaitForPod(ctx context.Context, job *batchv1.Job) (*corev1.Pod, error) {
	for {
		pods, err := e.Admin.CoreV1().Pods(e.Namespace()).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + job.Name})
		if err == nil && len(pods.Items) > 0 {
			return &pods.Items[0], nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no Pod for Job %s: %w", job.Name, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// All is the whole corpus. job is an admitted safe Job and pod its Pod, made by the Job controller.
func (e *Env) All(job *batchv1.Job, pod *corev1.Pod) []Case {
	var all []Case
	all = append(all, e.jobCases()...)
	all = append(all, e.approvalCases()...)
	all = append(all, e.workloadCases()...)
	all = append(all, e.updateCases(job)...)
	all = append(all, e.podCases(job, pod)...)
	all = append(all, e.tokenRequestCases(pod)...)
	all = append(all, e.vaultCases()...)
	all = append(all, e.namespaceCases()...)
	all = append(all, e.protectedCases()...)
	all = append(all, e.configMapCases()...)
	all = append(all, e.statusCases(job, pod)...)
	all = append(all, e.namespaceSubresourceCases()...)
	all = append(all, e.orphanCases(job, pod)...)
	all = append(all, e.ownObjectCases()...)
	// Last: the cases above that act on the safe Job and its Pod (update, pod, status, orphan) need them
	// still running, and a Job of k8s_get_pod_status lives seconds; these need neither.
	all = append(all, e.PlacementCases()...)
	return all
}

func (e *Env) jobCase(class, name, rule string, mutate func(*batchv1.Job), base func() *batchv1.Job) Case {
	return Case{Class: class, Name: name, Rule: rule, Submit: func(ctx context.Context) error {
		j := base()
		mutate(j)
		_, err := e.CreateJob(ctx, j, false)
		return err
	}}
}
