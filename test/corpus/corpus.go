// Package corpus is the adversarial admission corpus: one safe sandbox Job and one unsafe object (or action)
// per way to break the invariants, each submitted DIRECTLY to the API server, as someone who bypasses the
// MCP server would. The integration tests run it against a real kube-apiserver with the webhook
// registered; `make verify` runs the same corpus against the live cluster.
package corpus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/webhook"
)

// Env is what the corpus needs: the policy the webhook enforces, an approver key it trusts, and a client
// that bypasses the MCP server.
type Env struct {
	Policy   *policy.Compiled
	Approver *approval.PrivateKey
	Client   kubernetes.Interface
	// Runs distinguishes object names between runs against the same cluster.
	Run string

	mu      sync.Mutex
	created []string // Jobs admitted for real, for Cleanup
}

// Namespace is the sandbox namespace under test.
func (e *Env) Namespace() string { return e.Policy.Spec.Sandbox.Namespace }

// PodParams and ApplyParams are valid parameters of the read tool and the approval tool.
func PodParams() map[string]any { return map[string]any{"namespace": "demo-app"} }

// ApplyParams are valid terraform_apply parameters for a made-up plan.
func ApplyParams() map[string]any {
	return map[string]any{"workspace": "k8s-demo", "source": "tfws-0123456789abcdef0123", "plan_id": strings.Repeat("ab", 32)}
}

// Job renders the Job the MCP server would submit for tool and params (before the webhook's injection).
func (e *Env) Job(tool string, params map[string]any, token string) *batchv1.Job {
	t, err := e.Policy.Tool(tool)
	if err != nil {
		panic(err)
	}
	inv, err := t.Invoke(params)
	if err != nil {
		panic(err)
	}
	id := "req-" + rand.String(12)
	j, err := sandbox.RenderJob(e.Policy, sandbox.JobSpec{Invocation: inv, RequestID: id, ApprovalToken: token})
	if err != nil {
		panic(err)
	}
	return j
}

// Injected renders the Job as it looks after the webhook's injection, to tamper with the sidecar.
func (e *Env) Injected(tool string, params map[string]any) *batchv1.Job {
	j := e.Job(tool, params, "")
	t, _ := e.Policy.Tool(tool)
	inv, _ := t.Invoke(params)
	webhook.Inject(&j.Spec.Template.ObjectMeta, &j.Spec.Template.Spec, e.Policy, inv)
	return j
}

// Token signs an approval as `agent-sandbox approve` would; mut changes the claims before signing.
func (e *Env) Token(key *approval.PrivateKey, tool string, params map[string]any, mut func(*approval.Claims)) string {
	t, err := e.Policy.Tool(tool)
	if err != nil {
		panic(err)
	}
	inv, err := t.Invoke(params)
	if err != nil {
		panic(err)
	}
	hash, err := approval.ParamsHash(tool, inv.Params)
	if err != nil {
		panic(err)
	}
	req := &approval.Request{ID: "req-" + rand.String(12), Tool: tool, ParamsHash: hash, Namespace: inv.TargetNamespace, PlanDigest: inv.PlanDigest}
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

// Case is one unsafe object or action; Submit must be refused with a message naming Rule.
type Case struct {
	Name string
	Rule string
	// Submit performs the action and returns the API server's answer.
	Submit func(ctx context.Context) error
}

// Outcome of one case.
type Outcome struct {
	Case   Case
	Err    error
	Passed bool
}

// CreateJob creates a Job in the sandbox namespace (dry-run when dryRun).
func (e *Env) CreateJob(ctx context.Context, j *batchv1.Job, dryRun bool) (*batchv1.Job, error) {
	opts := metav1.CreateOptions{}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	out, err := e.Client.BatchV1().Jobs(e.Namespace()).Create(ctx, j, opts)
	if err == nil && !dryRun {
		e.mu.Lock()
		e.created = append(e.created, out.Name)
		e.mu.Unlock()
	}
	return out, err
}

// Cleanup deletes every Job the corpus got admitted (on a live cluster they would otherwise run).
func (e *Env) Cleanup(ctx context.Context) {
	e.mu.Lock()
	names := e.created
	e.created = nil
	e.mu.Unlock()
	bg := metav1.DeletePropagationBackground
	for _, n := range names {
		_ = e.Client.BatchV1().Jobs(e.Namespace()).Delete(ctx, n, metav1.DeleteOptions{PropagationPolicy: &bg})
	}
}

func (e *Env) jobCase(name, rule string, mutate func(*batchv1.Job), base func() *batchv1.Job) Case {
	return Case{Name: name, Rule: rule, Submit: func(ctx context.Context) error {
		j := base()
		mutate(j)
		_, err := e.CreateJob(ctx, j, false)
		return err
	}}
}

// Unsafe returns every unsafe object of the corpus. other is an approver key the webhook does NOT trust.
func (e *Env) Unsafe(other *approval.PrivateKey) []Case {
	pod := func() *batchv1.Job { return e.Job("k8s_get_pod_status", PodParams(), "") }
	injected := func() *batchv1.Job { return e.Injected("k8s_get_pod_status", PodParams()) }
	spec := func(j *batchv1.Job) *corev1.PodSpec { return &j.Spec.Template.Spec }
	tool := func(j *batchv1.Job) *corev1.Container { return &j.Spec.Template.Spec.Containers[0] }
	sidecar := func(j *batchv1.Job) *corev1.Container { return &j.Spec.Template.Spec.InitContainers[0] }
	setParams := func(j *batchv1.Job, p string) {
		j.Annotations[contract.AnnotationParams] = p
		j.Spec.Template.Annotations[contract.AnnotationParams] = p
	}
	cases := []Case{
		// Invariant 2: isolation, one rule at a time, in the tool container and in the sidecar.
		e.jobCase("runc runtime class", "runtime-class", func(j *batchv1.Job) { spec(j).RuntimeClassName = ptr.To("runc") }, pod),
		e.jobCase("no runtime class", "runtime-class", func(j *batchv1.Job) { spec(j).RuntimeClassName = nil }, pod),
		e.jobCase("host network", "no-host-namespaces", func(j *batchv1.Job) { spec(j).HostNetwork = true }, pod),
		e.jobCase("host PID", "no-host-namespaces", func(j *batchv1.Job) { spec(j).HostPID = true }, pod),
		e.jobCase("hostPath volume", "no-host-path", func(j *batchv1.Job) {
			spec(j).Volumes = append(spec(j).Volumes, corev1.Volume{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}})
		}, pod),
		e.jobCase("host port", "no-host-ports", func(j *batchv1.Job) { tool(j).Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 80}} }, pod),
		// The API server itself refuses privileged together with allowPrivilegeEscalation: false.
		e.jobCase("privileged tool", "not-privileged", func(j *batchv1.Job) {
			tool(j).SecurityContext.Privileged, tool(j).SecurityContext.AllowPrivilegeEscalation = ptr.To(true), ptr.To(true)
		}, pod),
		e.jobCase("privileged sidecar (init container)", "not-privileged", func(j *batchv1.Job) {
			sidecar(j).SecurityContext.Privileged, sidecar(j).SecurityContext.AllowPrivilegeEscalation = ptr.To(true), ptr.To(true)
		}, injected),
		e.jobCase("privilege escalation", "no-privilege-escalation", func(j *batchv1.Job) { tool(j).SecurityContext.AllowPrivilegeEscalation = ptr.To(true) }, pod),
		e.jobCase("capabilities not dropped", "drop-all-capabilities", func(j *batchv1.Job) { tool(j).SecurityContext.Capabilities.Drop = nil }, pod),
		e.jobCase("added capability", "no-added-capabilities", func(j *batchv1.Job) {
			tool(j).SecurityContext.Capabilities.Add = []corev1.Capability{"NET_ADMIN"}
		}, pod),
		e.jobCase("runs as root", "run-as-non-root", func(j *batchv1.Job) {
			spec(j).SecurityContext.RunAsUser = ptr.To(int64(0))
			spec(j).SecurityContext.RunAsNonRoot = ptr.To(false)
			tool(j).SecurityContext.RunAsNonRoot = ptr.To(false)
		}, pod),
		e.jobCase("seccomp unconfined", "seccomp-runtime-default", func(j *batchv1.Job) {
			spec(j).SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
			tool(j).SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
		}, pod),
		e.jobCase("writable root file system", "read-only-root-filesystem", func(j *batchv1.Job) { tool(j).SecurityContext.ReadOnlyRootFilesystem = ptr.To(false) }, pod),
		e.jobCase("no resource limits", "resource-limits", func(j *batchv1.Job) { tool(j).Resources = corev1.ResourceRequirements{} }, pod),
		e.jobCase("sidecar without limits (init container)", "resource-limits", func(j *batchv1.Job) { sidecar(j).Resources = corev1.ResourceRequirements{} }, injected),
		e.jobCase("no deadline", "deadline", func(j *batchv1.Job) { j.Spec.ActiveDeadlineSeconds = nil }, pod),
		e.jobCase("deadline above the policy", "deadline", func(j *batchv1.Job) { j.Spec.ActiveDeadlineSeconds = ptr.To(int64(86400)) }, pod),
		e.jobCase("sysctls", "no-sysctls", func(j *batchv1.Job) {
			spec(j).SecurityContext.Sysctls = []corev1.Sysctl{{Name: "net.ipv4.ip_unprivileged_port_start", Value: "0"}}
		}, pod),
		// The API server allows an unmasked /proc only in a user namespace.
		e.jobCase("unmasked procMount", "default-proc-mount", func(j *batchv1.Job) {
			spec(j).HostUsers = ptr.To(false)
			tool(j).SecurityContext.ProcMount = ptr.To(corev1.UnmaskedProcMount)
		}, pod),
		e.jobCase("credential in an env var", "no-credentials-in-env", func(j *batchv1.Job) {
			tool(j).Env = append(tool(j).Env, corev1.EnvVar{Name: "KUBE_TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "admin-token"}, Key: "token"}}})
		}, pod),
		e.jobCase("extra projected service-account token", "service-account-token", func(j *batchv1.Job) {
			spec(j).Volumes = append(spec(j).Volumes, corev1.Volume{Name: "api-token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To(int64(3600))}}}}}})
		}, pod),
		e.jobCase("automounted API token", "service-account-token", func(j *batchv1.Job) { spec(j).AutomountServiceAccountToken = ptr.To(true) }, pod),
		e.jobCase("Vault token mounted in the tool", "vault-token-sidecar-only", func(j *batchv1.Job) {
			tool(j).VolumeMounts = append(tool(j).VolumeMounts, corev1.VolumeMount{Name: contract.VaultTokenVolume, MountPath: "/vault"})
		}, injected),
		// Invariant 3: exactness.
		e.jobCase("wrong image", "exact-image", func(j *batchv1.Job) { tool(j).Image = "localhost/busybox:agent-sandbox" }, pod),
		e.jobCase("extra argument", "exact-command", func(j *batchv1.Job) { tool(j).Command = append(tool(j).Command, "--all-namespaces") }, pod),
		e.jobCase("other command", "exact-command", func(j *batchv1.Job) {
			tool(j).Command = []string{"/bin/sh", "-c", "cat /var/run/agent-sandbox/credentials/kubeconfig"}
		}, pod),
		e.jobCase("shell-injected parameter", "invalid-parameters", func(j *batchv1.Job) { setParams(j, `{"namespace":"demo-app; rm -rf /"}`) }, pod),
		e.jobCase("sidecar scope tampered", "exact-command", func(j *batchv1.Job) {
			for i, a := range sidecar(j).Command {
				if strings.HasPrefix(a, "--secrets-role=") {
					sidecar(j).Command[i] = "--secrets-role=agent-sandbox-terraform-apply"
				}
			}
		}, injected),
		// Invariant 4: scope.
		e.jobCase("wrong service account", "service-account", func(j *batchv1.Job) { spec(j).ServiceAccountName = "default" }, pod),
		e.jobCase("target namespace kube-system", "namespace-not-allowed", func(j *batchv1.Job) {
			setParams(j, `{"namespace":"kube-system"}`)
			tool(j).Command[3] = "--namespace=kube-system"
		}, pod),
		// Invariant 1: default deny.
		e.jobCase("unknown tool label", "unknown-tool", func(j *batchv1.Job) {
			j.Labels[contract.LabelTool], j.Spec.Template.Labels[contract.LabelTool] = "kubectl_exec", "kubectl_exec"
		}, pod),
		e.jobCase("no tool label", "no-tool-label", func(j *batchv1.Job) {
			delete(j.Labels, contract.LabelTool)
			delete(j.Spec.Template.Labels, contract.LabelTool)
		}, pod),
		e.jobCase("retries", "job-shape", func(j *batchv1.Job) { j.Spec.BackoffLimit = ptr.To(int32(6)) }, pod),
		{Name: "Pod created directly", Rule: "pods-only-from-jobs", Submit: func(ctx context.Context) error {
			_, err := e.Client.CoreV1().Pods(e.Namespace()).Create(ctx, e.podFrom(injected(), nil), metav1.CreateOptions{})
			return err
		}},
		{Name: "Deployment in the sandbox namespace", Rule: "jobs-only", Submit: func(ctx context.Context) error {
			j := pod()
			d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "sneaky-" + e.Run}, Spec: appsv1.DeploymentSpec{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "sneaky"}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "sneaky"}}, Spec: j.Spec.Template.Spec}}}
			d.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyAlways
			_, err := e.Client.AppsV1().Deployments(e.Namespace()).Create(ctx, d, metav1.CreateOptions{})
			return err
		}},
		{Name: "CronJob in the sandbox namespace", Rule: "jobs-only", Submit: func(ctx context.Context) error {
			j := pod()
			cj := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: "sneaky-" + e.Run}, Spec: batchv1.CronJobSpec{Schedule: "* * * * *",
				JobTemplate: batchv1.JobTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: j.Labels, Annotations: j.Annotations}, Spec: j.Spec}}}
			_, err := e.Client.BatchV1().CronJobs(e.Namespace()).Create(ctx, cj, metav1.CreateOptions{})
			return err
		}},
	}
	cases = append(cases, e.approvalCases(other)...)
	return cases
}

// approvalCases break invariant 5 with terraform_apply, which always needs a signed approval.
func (e *Env) approvalCases(other *approval.PrivateKey) []Case {
	apply := func(token string) func() *batchv1.Job {
		return func() *batchv1.Job { return e.Job("terraform_apply", ApplyParams(), token) }
	}
	none := func(*batchv1.Job) {}
	good := func() string { return e.Token(e.Approver, "terraform_apply", ApplyParams(), nil) }
	forged := func() string {
		t := good()
		i := strings.LastIndex(t, ".")
		sig := []byte(t[i+1:])
		for k := range sig[:8] {
			sig[k] = 'A' + byte(k)
		}
		return t[:i+1] + string(sig)
	}
	otherParams := ApplyParams()
	otherParams["plan_id"] = strings.Repeat("cd", 32)
	return []Case{
		e.jobCase("apply without a token", "approval-required", none, apply("")),
		e.jobCase("apply with a forged token", "approval", none, apply(forged())),
		e.jobCase("apply with a token from another key", "approval", none, apply(e.Token(other, "terraform_apply", ApplyParams(), nil))),
		e.jobCase("apply with an expired token", "approval", none, apply(e.Token(e.Approver, "terraform_apply", ApplyParams(), func(c *approval.Claims) {
			c.IssuedAt, c.NotBefore, c.Expiry = c.IssuedAt.Add(-2*time.Hour), c.NotBefore.Add(-2*time.Hour), c.IssuedAt.Add(-90*time.Minute)
		}))),
		e.jobCase("apply with a token for other parameters", "approval", none, apply(e.Token(e.Approver, "terraform_apply", otherParams, nil))),
		e.jobCase("apply with a token for another tool", "approval", none, apply(e.Token(e.Approver, "terraform_apply", ApplyParams(), func(c *approval.Claims) {
			c.Tool = "terraform_plan"
		}))),
		e.jobCase("apply with a token for another cluster", "approval", none, apply(e.Token(e.Approver, "terraform_apply", ApplyParams(), func(c *approval.Claims) {
			c.Audience = "some-other-cluster"
		}))),
		{Name: "apply replaying a used token", Rule: "approval", Submit: func(ctx context.Context) error {
			tok := good()
			if _, err := e.CreateJob(ctx, apply(tok)(), false); err != nil {
				return fmt.Errorf("setup: the first use of a good token was refused: %w", err)
			}
			_, err := e.CreateJob(ctx, apply(tok)(), false)
			return err
		}},
	}
}

// podFrom builds a Pod from a Job's template, as the Job controller would; owner may be nil.
func (e *Env) podFrom(j *batchv1.Job, owner *batchv1.Job) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "direct-" + e.Run + "-" + rand.String(4), Labels: j.Spec.Template.Labels,
		Annotations: j.Spec.Template.Annotations}, Spec: *j.Spec.Template.Spec.DeepCopy()}
	if owner != nil {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: owner.Name, UID: owner.UID, Controller: ptr.To(true)}}
	}
	return p
}

// Run submits every case and reports whether each was refused with its rule named.
func Run(ctx context.Context, cases []Case) []Outcome {
	out := make([]Outcome, len(cases))
	for i, c := range cases {
		err := c.Submit(ctx)
		out[i] = Outcome{Case: c, Err: err, Passed: Refused(err, c.Rule)}
	}
	return out
}

// Refused reports whether err is an admission refusal by agent-sandbox naming rule.
func Refused(err error, rule string) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "agent-sandbox denied this") && strings.Contains(msg, rule)
}

// Race creates n Jobs with one approval token at once and returns how many were admitted.
func (e *Env) Race(ctx context.Context, n int) (admitted int, errs []error) {
	tok := e.Token(e.Approver, "terraform_apply", ApplyParams(), nil)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := e.CreateJob(ctx, e.Job("terraform_apply", ApplyParams(), tok), false)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				admitted++
			} else {
				errs = append(errs, err)
			}
		}()
	}
	wg.Wait()
	return admitted, errs
}

// DryRunThenCreate submits a Job with a good token as a server-side dry run twice, then for real: the dry
// runs must consume nothing.
func (e *Env) DryRunThenCreate(ctx context.Context) error {
	tok := e.Token(e.Approver, "terraform_apply", ApplyParams(), nil)
	for i := 0; i < 2; i++ {
		if _, err := e.CreateJob(ctx, e.Job("terraform_apply", ApplyParams(), tok), true); err != nil {
			return fmt.Errorf("dry run %d refused: %w", i+1, err)
		}
	}
	if _, err := e.CreateJob(ctx, e.Job("terraform_apply", ApplyParams(), tok), false); err != nil {
		return fmt.Errorf("real create after two dry runs refused: %w", err)
	}
	return nil
}

// SafeJob creates the safe Job (server-side dry run when dryRun) and checks that it was admitted and that
// the webhook injected the credential agent.
func (e *Env) SafeJob(ctx context.Context, dryRun bool) (*batchv1.Job, error) {
	j, err := e.CreateJob(ctx, e.Job("k8s_get_pod_status", PodParams(), ""), dryRun)
	if err != nil {
		return nil, fmt.Errorf("the safe Job was refused: %w", err)
	}
	s := j.Spec.Template.Spec
	if j.Spec.Template.Annotations[contract.AnnotationInjected] != "true" || len(s.InitContainers) != 1 || s.InitContainers[0].Name != contract.CredentialAgentContainer {
		return j, errors.New("the safe Job was admitted but the credential agent was not injected")
	}
	return j, nil
}

// PodActions are refusals that need a Pod the Job controller created: exec into it, add an ephemeral
// container, and create a Pod that claims the Job as its owner.
func (e *Env) PodActions(job *batchv1.Job, pod *corev1.Pod) []Case {
	return []Case{
		{Name: "exec into a sandbox Pod", Rule: "no-pod-access", Submit: func(ctx context.Context) error {
			return e.Client.CoreV1().RESTClient().Post().Namespace(pod.Namespace).Resource("pods").Name(pod.Name).SubResource("exec").
				Param("container", contract.ToolContainer).Param("command", "cat").Param("command", contract.KubeconfigPath).
				Param("stdout", "true").Do(ctx).Error()
		}},
		{Name: "ephemeral container on a sandbox Pod", Rule: "no-ephemeral-containers", Submit: func(ctx context.Context) error {
			// Read the Pod again: on a live node its status has moved on since it was first seen.
			p, err := e.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			// A debug container that passes Pod Security "restricted", so that the refusal is agent-sandbox's.
			p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
				Name: "debug", Image: "localhost/busybox:agent-sandbox", Command: []string{"sh"},
				SecurityContext: sandbox.HardenedContainerSecurityContext()}})
			_, err = e.Client.CoreV1().Pods(pod.Namespace).UpdateEphemeralContainers(ctx, p.Name, p, metav1.UpdateOptions{})
			return err
		}},
		{Name: "Pod with a forged owner reference", Rule: "pods-only-from-jobs", Submit: func(ctx context.Context) error {
			_, err := e.Client.CoreV1().Pods(e.Namespace()).Create(ctx, e.podFrom(job, job), metav1.CreateOptions{})
			return err
		}},
	}
}

// WaitForPod waits until the Job controller has created the Job's Pod.
func (e *Env) WaitForPod(ctx context.Context, job *batchv1.Job) (*corev1.Pod, error) {
	for {
		pods, err := e.Client.CoreV1().Pods(e.Namespace()).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + job.Name})
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
