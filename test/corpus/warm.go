package corpus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
)

// The warm-pool twins of the corpus (docs/design/warm-pool.md): warm Jobs made by anyone but the pool or
// unlike the warm rendering, and claims forged, edited, doubled, replayed or put on the wrong Pod. Every
// claim below is submitted with the MCP server's identity, which may patch Pods (to claim them).

// WarmTool is the tool the shipped policy keeps a warm pool for.
const WarmTool = "k8s_get_pod_status"

// Impersonating returns a client that acts as user, through admin (which must be allowed to impersonate).
func Impersonating(admin *rest.Config, user string) (kubernetes.Interface, error) {
	cfg := rest.CopyConfig(admin)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	return kubernetes.NewForConfig(cfg)
}

// WaitWarmPod waits for a claimable warm Pod of WarmTool other than the ones named in skip.
func (e *Env) WaitWarmPod(ctx context.Context, limit time.Duration, skip ...string) (*corev1.Pod, error) {
	sel := labels.Set{contract.LabelTool: WarmTool, contract.LabelWarm: "true"}.String()
	end := time.Now().Add(limit)
	for {
		pods, err := e.Admin.CoreV1().Pods(e.Namespace()).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err == nil {
			for i := range pods.Items {
				p := &pods.Items[i]
				if sandbox.Claimable(p) && !contains(skip, p.Name) {
					return p, nil
				}
			}
		}
		if time.Now().After(end) {
			return nil, fmt.Errorf("no ready warm %s Pod within %s (is the pool on: policy warmPool, chart webhook.warmPool.enabled?)", WarmTool, limit)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Claim renders the claim the MCP server would patch onto a warm Pod for params.
func (e *Env) Claim(params map[string]any, requestID, token string) string {
	c, err := sandbox.RenderClaim(e.invocation(WarmTool, params), requestID, contract.SplitApprovalTokens(token), AuditHead)
	if err != nil {
		panic(err)
	}
	return c
}

// ClaimPod patches claim onto pod as the MCP server (a server-side dry run when dryRun).
func (e *Env) ClaimPod(ctx context.Context, pod *corev1.Pod, claim string, dryRun bool) error {
	return e.patchPodAs(ctx, e.MCP, pod, map[string]any{"metadata": map[string]any{"annotations": map[string]string{contract.AnnotationClaim: claim}}}, dryRun)
}

func (e *Env) patchPodAs(ctx context.Context, c kubernetes.Interface, pod *corev1.Pod, patch map[string]any, dryRun bool) error {
	return e.patchPodTypeAs(ctx, c, pod, types.MergePatchType, patch, dryRun)
}

func (e *Env) patchPodTypeAs(ctx context.Context, c kubernetes.Interface, pod *corev1.Pod, pt types.PatchType, patch map[string]any, dryRun bool) error {
	body, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	opts := metav1.PatchOptions{}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	_, err = c.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, pt, body, opts)
	return err
}

// editClaim decodes a rendered claim, changes it, and encodes it again (no longer the rendering).
func editClaim(claim string, mut func(c *sandbox.Claim)) string {
	c, err := sandbox.ParseClaim(claim)
	if err != nil {
		panic(err)
	}
	mut(c)
	raw, err := json.Marshal(c)
	if err != nil {
		panic(err)
	}
	return string(raw)
}

// WarmCases are the twins that change nothing when refused: each is a server-side dry run or refused
// outright. warm is an unclaimed warm Pod, cold a call's (cold) sandbox Pod; pool acts as the webhook's own
// pool identity, which may create warm Jobs (nil skips the cases that need it).
func (e *Env) WarmCases(warm, cold *corev1.Pod, pool kubernetes.Interface) []Case {
	id := func() string {
		s, err := approval.NewRequestID()
		if err != nil {
			panic(err)
		}
		return s
	}
	good := func() string { return e.Claim(PodParams(), id(), "") }
	claim := func(name, rule string, on *corev1.Pod, value func() string) Case {
		return Case{Class: "warm", Name: name, Rule: rule, Submit: func(ctx context.Context) error {
			return e.ClaimPod(ctx, on, value(), true)
		}}
	}
	warmJob := func() *batchv1.Job {
		t, err := e.Policy.Tool(WarmTool)
		if err != nil {
			panic(err)
		}
		s, err := sandbox.NewWarmSuffix()
		if err != nil {
			panic(err)
		}
		j, err := sandbox.RenderWarmJob(e.Policy, t, s)
		if err != nil {
			panic(err)
		}
		return j
	}
	createWarm := func(c func() kubernetes.Interface, mut func(*batchv1.Job)) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			j := warmJob()
			if mut != nil {
				mut(j)
			}
			_, err := c().BatchV1().Jobs(e.Namespace()).Create(ctx, j, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}
	}
	cases := []Case{
		{Class: "warm", Name: "warm Job created by the MCP server", Rule: "warm-pool", Submit: createWarm(func() kubernetes.Interface { return e.MCP }, nil)},
		{Class: "warm", Name: "warm Job created by a cluster-admin who is not the pool", Rule: "warm-pool", Submit: createWarm(func() kubernetes.Interface { return e.Attacker }, nil)},
		{Class: "warm", Name: "warm Job created by an edit user", Rule: "warm-pool", Submit: createWarm(func() kubernetes.Interface { return e.Edit }, nil)},
		claim("claim whose argv is not the rendering", "claim-exact", warm, func() string {
			return editClaim(good(), func(c *sandbox.Claim) {
				c.Argv = []string{"/bin/sh", "-c", "cat " + contract.CredentialDir + "/kubeconfig"}
			})
		}),
		claim("claim whose argv adds a flag", "claim-exact", warm, func() string {
			return editClaim(good(), func(c *sandbox.Claim) { c.Argv = append(c.Argv, "--all-namespaces") })
		}),
		claim("claim with a shell-injected parameter", "invalid-parameters", warm, func() string {
			return editClaim(good(), func(c *sandbox.Claim) { c.Params = []byte(`{"namespace":"demo-app; cat /etc/passwd"}`) })
		}),
		claim("claim for kube-system", "namespace-not-allowed", warm, func() string {
			return editClaim(good(), func(c *sandbox.Claim) {
				c.Params, c.Namespace = []byte(`{"namespace":"kube-system"}`), "kube-system"
				for i, a := range c.Argv {
					c.Argv[i] = strings.ReplaceAll(a, "demo-app", "kube-system")
				}
			})
		}),
		claim("claim whose namespace is not its parameters'", "claim-exact", warm, func() string {
			return editClaim(good(), func(c *sandbox.Claim) { c.Namespace = "kube-system" })
		}),
		claim("claim for another tool than the Pod's", "claim", warm, func() string {
			return editClaim(good(), func(c *sandbox.Claim) { c.Tool = "terraform_apply" })
		}),
		claim("claim carrying an approval token for a read tool", "claim", warm, func() string {
			return e.Claim(PodParams(), id(), e.Token(e.Approver, "terraform_apply", ApplyParams(), nil))
		}),
		claim("claim with a request ID that is not a call's", "claim", warm, func() string {
			return editClaim(good(), func(c *sandbox.Claim) { c.RequestID = "req-../../etc" })
		}),
		claim("claim without the audit chain head", "claim", warm, func() string {
			return editClaim(good(), func(c *sandbox.Claim) { c.AuditHead = "" })
		}),
		claim("claim whose audit head is not a hash", "claim", warm, func() string {
			return editClaim(good(), func(c *sandbox.Claim) { c.AuditHead = strings.ToUpper(AuditHead) })
		}),
		claim("claim with an unknown field", "claim", warm, func() string {
			return strings.Replace(good(), "{", `{"env":{"HTTPS_PROXY":"http://evil"},`, 1)
		}),
		claim("claim on a cold sandbox Pod", "immutable", cold, good),
		{Class: "warm", Name: "claim that also adds a label", Rule: "claim-exact", Submit: func(ctx context.Context) error {
			return e.patchPodAs(ctx, e.MCP, warm, map[string]any{"metadata": map[string]any{
				"labels":      map[string]string{"app": "web"},
				"annotations": map[string]string{contract.AnnotationClaim: good()}}}, true)
		}},
		{Class: "warm", Name: "claim that also swaps the tool container's image", Rule: "claim-exact", Submit: func(ctx context.Context) error {
			// A strategic merge patch changes only the named container's image, which the API server allows.
			return e.patchPodTypeAs(ctx, e.MCP, warm, types.StrategicMergePatchType, map[string]any{
				"metadata": map[string]any{"annotations": map[string]string{contract.AnnotationClaim: good()}},
				"spec":     map[string]any{"containers": []any{map[string]any{"name": contract.ToolContainer, "image": "busybox:latest"}}}}, true)
		}},
		{Class: "warm", Name: "claim by an edit user that is not a claim object", Rule: "claim", Submit: func(ctx context.Context) error {
			return e.patchPodAs(ctx, e.Edit, warm, map[string]any{"metadata": map[string]any{"annotations": map[string]string{contract.AnnotationClaim: "sh -c id"}}}, true)
		}},
		// Issue 22, finding 1: the claim annotation written through pods/status, which the pods webhooks do not
		// see, with the argv of the original report and a made-up signature. Refused by admission's
		// subresource allowlist (metadata never changes through a status subresource: rule pod-status); and
		// were it stored, the warm Pod would refuse it, unsigned (TestWarmClaimSignature). A dry run.
		{Class: "warm", Name: "warm claim forged through pods/status", Rule: "pod-status", Submit: func(ctx context.Context) error {
			forged := editClaim(good(), func(c *sandbox.Claim) { c.Argv = []string{"/agent-sandbox", "version"} })
			body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
				contract.AnnotationClaim: forged, contract.AnnotationClaimSignature: "v1.forged"}}})
			if err != nil {
				return err
			}
			_, err = e.Attacker.CoreV1().Pods(warm.Namespace).Patch(ctx, warm.Name, types.MergePatchType, body,
				metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}, "status")
			return err
		}},
		{Class: "warm", Name: "ephemeral container on a warm Pod", Rule: "no-ephemeral-containers", Submit: func(ctx context.Context) error {
			p := warm.DeepCopy()
			// Restricted-compliant, so that Pod Security has nothing to say and the webhook decides.
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox",
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptrBool(false), RunAsNonRoot: ptrBool(true),
					Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}}}}
			_, err := e.Attacker.CoreV1().Pods(p.Namespace).UpdateEphemeralContainers(ctx, p.Name, p, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}},
	}
	if pool != nil {
		cases = append(cases,
			Case{Class: "warm", Name: "warm Job from the pool's identity that runs the tool's argv", Rule: "exact-command", Submit: createWarm(func() kubernetes.Interface { return pool }, func(j *batchv1.Job) {
				j.Spec.Template.Spec.Containers[0].Command = []string{"/agent-sandbox", "run", "pod-status", "--namespace=kube-system"}
			})},
			Case{Class: "warm", Name: "warm Job from the pool's identity with a day-long deadline", Rule: "deadline", Submit: createWarm(func() kubernetes.Interface { return pool }, func(j *batchv1.Job) {
				j.Spec.ActiveDeadlineSeconds = ptrInt64(86400)
			})},
			Case{Class: "warm", Name: "warm Job from the pool's identity with a proxy in the tool's environment", Rule: "exact", Submit: createWarm(func() kubernetes.Interface { return pool }, func(j *batchv1.Job) {
				j.Spec.Template.Spec.Containers[0].Env = append(j.Spec.Template.Spec.Containers[0].Env, corev1.EnvVar{Name: "HTTPS_PROXY", Value: "http://evil:3128"})
			})},
		)
	}
	return cases
}

func ptrInt64(v int64) *int64 { return &v }

func ptrBool(v bool) *bool { return &v }

// ClaimOnceOnly claims warm for real with a fresh request ID and checks what must follow: a second claim,
// an edited claim and a removed claim on that Pod are refused, and the same request ID is refused on the
// next warm Pod the pool makes. It returns the names of the checks that passed, or an error for the first
// that did not. The claimed Pod serves its call (a credential for demo-app, revoked when it ends).
func (e *Env) ClaimOnceOnly(ctx context.Context, warm *corev1.Pod) ([]string, error) {
	id, err := approval.NewRequestID()
	if err != nil {
		return nil, err
	}
	claim := e.Claim(PodParams(), id, "")
	if err := e.ClaimPod(ctx, warm, claim, false); err != nil {
		return nil, fmt.Errorf("the rendered claim was refused: %w", err)
	}
	var passed []string
	refused := func(name, rule string, err error) error {
		if !Refused(err, rule) {
			return fmt.Errorf("%s: want a refusal naming %s, got %v", name, rule, err)
		}
		passed = append(passed, name)
		return nil
	}
	other, _ := approval.NewRequestID()
	if err := refused("second claim on a claimed Pod", "immutable", e.ClaimPod(ctx, warm, e.Claim(PodParams(), other, ""), false)); err != nil {
		return passed, err
	}
	edited := editClaim(claim, func(c *sandbox.Claim) { c.Argv = append(c.Argv, "--all-namespaces") })
	if err := refused("claim edited after admission", "immutable", e.ClaimPod(ctx, warm, edited, false)); err != nil {
		return passed, err
	}
	removed := e.patchPodAs(ctx, e.MCP, warm, map[string]any{"metadata": map[string]any{"annotations": map[string]any{contract.AnnotationClaim: nil}}}, false)
	if err := refused("claim removed after admission", "immutable", removed); err != nil {
		return passed, err
	}
	next, err := e.WaitWarmPod(ctx, 3*time.Minute, warm.Name)
	if err != nil {
		return passed, fmt.Errorf("the pool did not replace the claimed Pod: %w", err)
	}
	if err := refused("claim replayed onto the next warm Pod (same request ID)", "claim-replayed", e.ClaimPod(ctx, next, claim, false)); err != nil {
		return passed, err
	}
	return passed, nil
}

// DeleteWarmJob deletes the warm Job of pod (after its claim was served or refused).
func (e *Env) DeleteWarmJob(ctx context.Context, pod *corev1.Pod) error {
	name := pod.Labels[batchv1.JobNameLabel]
	if name == "" {
		return errors.New("the Pod names no Job")
	}
	bg := metav1.DeletePropagationBackground
	return e.Admin.BatchV1().Jobs(pod.Namespace).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &bg})
}

// WarmReplacement deletes (or, with evict, evicts) an unclaimed, running warm Pod of WarmTool, as an admin,
// and measures how long until another warm Pod of the tool is running and claimable: the pool must notice
// that the Pod's Job will never get another Pod and replace the Job (issue 22: within seconds, not at the
// Job's deadline). It returns the time from the deletion to the replacement's readiness.
func (e *Env) WarmReplacement(ctx context.Context, evict bool, limit time.Duration) (time.Duration, error) {
	t, err := e.Policy.Tool(WarmTool)
	if err != nil || t.WarmPool == nil {
		return 0, fmt.Errorf("the policy keeps no warm pool for %s", WarmTool)
	}
	victim, err := e.WaitWarmPod(ctx, 3*time.Minute)
	if err != nil {
		return 0, err
	}
	// The replacement is a new Pod: every warm Pod that exists now is skipped. The pool keeps min idle Pods,
	// so it makes one only if the others fall short of min without the victim.
	sel := labels.Set{contract.LabelTool: WarmTool, contract.LabelWarm: "true"}.String()
	pods, err := e.Admin.CoreV1().Pods(e.Namespace()).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return 0, err
	}
	var existing []string
	idle := 0
	for i := range pods.Items {
		existing = append(existing, pods.Items[i].Name)
		if sandbox.Claimable(&pods.Items[i]) && pods.Items[i].Name != victim.Name {
			idle++
		}
	}
	if idle >= t.WarmPool.Min {
		return 0, fmt.Errorf("%d other idle warm Pods (min %d): the pool would not replace %s, nothing to measure", idle, t.WarmPool.Min, victim.Name)
	}
	start := time.Now()
	if evict {
		err = e.Admin.CoreV1().Pods(victim.Namespace).EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: victim.Name, Namespace: victim.Namespace}})
	} else {
		err = e.Admin.CoreV1().Pods(victim.Namespace).Delete(ctx, victim.Name, metav1.DeleteOptions{})
	}
	if err != nil {
		return 0, fmt.Errorf("remove warm Pod %s: %w", victim.Name, err)
	}
	if _, err := e.WaitWarmPod(ctx, limit, existing...); err != nil {
		return time.Since(start), fmt.Errorf("no replacement for the removed warm Pod %s within %s: %w", victim.Name, limit, err)
	}
	return time.Since(start), nil
}
