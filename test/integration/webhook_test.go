//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app"
	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/installcheck"
	"github.com/agent-sandbox/agent-sandbox/internal/ledger"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/test/corpus"
	"github.com/agent-sandbox/agent-sandbox/test/harness"
	"github.com/agent-sandbox/agent-sandbox/webhook"
)

const ledgerNamespace = "agent-sandbox-system"

// webhookEnv is a real kube-apiserver (with the Job controller), a real Vault configured from the policy,
// the chart's MCP role and default-deny NetworkPolicy, the webhook registered with the API server, and the
// corpus's attacking identities.
type webhookEnv struct {
	api    *harness.APIServer
	hook   *harness.Webhook
	corpus *corpus.Env
}

// safeJobPod creates the corpus's safe Job and waits for the Pod the Job controller makes of it.
func (env *webhookEnv) safeJobPod(t *testing.T, ctx context.Context) (*batchv1.Job, *corev1.Pod) {
	t.Helper()
	job, err := env.corpus.SafeJob(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	pod, err := env.corpus.WaitForPod(ctx, job)
	if err != nil {
		t.Fatalf("the Job controller's Pod for the safe Job: %v", err)
	}
	return job, pod
}

func startWebhookEnv(t *testing.T) *webhookEnv {
	t.Helper()
	return startWebhookEnvWith(t, "../../policy/policy.yaml")
}

// startWebhookEnvWith is startWebhookEnv with the webhook, Vault and the corpus on the policy in policyFile.
func startWebhookEnvWith(t *testing.T, policyFile string) *webhookEnv {
	t.Helper()
	// clusterrole-aggregation fills the built-in edit and admin roles, which the corpus's edit user holds.
	api := harness.StartAPIServer(t, harness.WithControllerManager("job", "serviceaccount-token", "root-ca-cert-publisher", "clusterrole-aggregation"))
	p, err := policy.LoadFile(policyFile)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cs := api.Clientset
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: p.Spec.Sandbox.Namespace, Labels: map[string]string{
			contract.LabelSandboxNamespace: "true", "pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}}},
		localNamespace(t, "demo-app"), // enforcing Pod Security, or vault configure refuses it
		{ObjectMeta: metav1.ObjectMeta{Name: ledgerNamespace}},
	} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: p.Spec.Sandbox.RuntimeClassName}, Handler: "runsc"}
	if _, err := cs.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, tool := range p.Spec.Tools {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: tool.ServiceAccount}, AutomountServiceAccountToken: new(false)}
		if _, err := cs.CoreV1().ServiceAccounts(p.Spec.Sandbox.Namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The chart's MCP identity and its default-deny NetworkPolicy, as rendered by the chart itself.
	chart := chartRenderArgs(t)
	sandboxNS := p.Spec.Sandbox.Namespace
	direct := newClient(t, api.Config)
	chart.install(t, ctx, direct, sandboxNS, "agent-sandbox-mcp", "ServiceAccount", "Role", "RoleBinding")
	chart.install(t, ctx, direct, sandboxNS, corpus.DefaultDenyPolicy, "NetworkPolicy")

	// Vault, configured from the policy by the real command: its Kubernetes auth method has the API
	// server review the tokens the Vault-direct cases bring.
	vt := newVaultTarget(t, api)
	var out, errOut bytes.Buffer
	if code := app.Main(ctx, vt.configureArgs(policyFile), strings.NewReader(""), &out, &errOut); code != 0 {
		t.Fatalf("vault configure: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	issuer, err := serviceAccountIssuer(ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := corpus.NewTokenSigner(filepath.Join(api.Env.ControlPlane.APIServer.CertDir, "sa-signer.key"), issuer)
	if err != nil {
		t.Fatal(err)
	}

	key, err := approval.GenerateKey("integration-approver")
	if err != nil {
		t.Fatal(err)
	}
	other, _ := approval.GenerateKey("untrusted-approver")
	// A second trusted approver, for the plans that need two.
	second, err := approval.GenerateKey("integration-second-approver")
	if err != nil {
		t.Fatal(err)
	}
	trusted := key.KeySet()
	if err := trusted.Merge(second.KeySet()); err != nil {
		t.Fatal(err)
	}
	records := &ledger.ConfigMapLedger{Client: direct, Namespace: ledgerNamespace}
	checker := &webhook.Checker{
		Ledger:  records,
		Pods:    records,
		Anchors: records,
		Cluster: apiReader{direct},
		Identities: webhook.Identities{
			// The harness's controller-manager authenticates as the admin user; the corpus poses as the
			// production Job controller's ServiceAccount.
			JobControllerUsers: []string{"harness-admin", webhook.DefaultJobControllerUsers[0]},
			MCPUser:            "system:serviceaccount:" + sandboxNS + ":agent-sandbox-mcp",
		},
	}
	checker.SetPolicy(p)
	checker.SetKeys(trusted)
	hook := harness.StartWebhook(t, api, checker)

	ids, err := corpus.Provision(ctx, api.Config, sandboxNS, "agent-sandbox-mcp")
	if err != nil {
		t.Fatal(err)
	}
	// No Node authorizer here: the corpus's kubelet cases need RBAC to reach admission.
	if err := ids.GrantNodeRBAC(ctx, corpus.NodeWithoutPods); err != nil {
		t.Fatal(err)
	}
	env := &corpus.Env{Policy: p, Approver: key, Other: other, Second: second, Identities: ids, Run: "it",
		Vault:     corpus.VaultTarget{Addr: vt.vault.Addr, AuthMount: p.Spec.Sandbox.CredentialAgent.VaultAuthMount, Sign: signer},
		FinishJob: finishWithoutKubelet(cs)}
	return &webhookEnv{api: api, hook: hook, corpus: env}
}

// serviceAccountIssuer is the API server's service-account token issuer.
func serviceAccountIssuer(ctx context.Context, cs kubernetes.Interface) (string, error) {
	raw, err := cs.Discovery().RESTClient().Get().AbsPath("/.well-known/openid-configuration").DoRaw(ctx)
	if err != nil {
		return "", err
	}
	var d struct {
		Issuer string `json:"issuer"`
	}
	err = json.Unmarshal(raw, &d)
	return d.Issuer, err
}

// finishWithoutKubelet plays the kubelet for a Job's Pod in an environment without one: it reports the
// Pod Succeeded through pods/status, and waits for the real Job controller to mark the Job complete.
func finishWithoutKubelet(cs kubernetes.Interface) func(ctx context.Context, job *batchv1.Job) error {
	return func(ctx context.Context, job *batchv1.Job) error {
		var pod *corev1.Pod
		for pod == nil {
			pods, err := cs.CoreV1().Pods(job.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + job.Name})
			if err == nil && len(pods.Items) > 0 {
				pod = &pods.Items[0]
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("no Pod for Job %s: %w", job.Name, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
		now := metav1.Now()
		pod.Status.Phase = corev1.PodSucceeded
		for _, c := range pod.Spec.Containers {
			pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image,
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now}}})
		}
		if _, err := cs.CoreV1().Pods(job.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("report Pod %s Succeeded: %w", pod.Name, err)
		}
		for {
			j, err := cs.BatchV1().Jobs(job.Namespace).Get(ctx, job.Name, metav1.GetOptions{})
			if err == nil {
				for _, c := range j.Status.Conditions {
					if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
						return nil
					}
				}
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("Job %s did not complete: %w", job.Name, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

type apiReader struct{ c client.Client }

func (a apiReader) GetJob(ctx context.Context, ns, name string) (*batchv1.Job, error) {
	var job batchv1.Job
	err := a.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &job)
	return &job, err
}

func (a apiReader) GetPod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	var pod corev1.Pod
	err := a.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &pod)
	return &pod, err
}

// TestWebhookAdmissionCorpus submits the whole adversarial corpus directly to a real kube-apiserver and a
// real Vault: the safe Job is admitted and mutated, every unsafe object and action is refused with its
// rule named, by the webhook or by Vault.
func TestWebhookAdmissionCorpus(t *testing.T) {
	env := startWebhookEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	defer env.corpus.Cleanup(context.Background())

	job, pod := env.safeJobPod(t, ctx)
	if pod.Annotations[contract.AnnotationInjected] != "true" || len(pod.Spec.InitContainers) != 1 {
		t.Fatalf("the safe Job's Pod lacks the credential agent: %+v", pod.Spec.InitContainers)
	}
	if err := env.corpus.BoundLoginWorks(ctx); err != nil {
		t.Fatalf("control: Vault refuses even a correctly bound token: %v", err)
	}
	// The admitted Job left its audit anchor, with the head it declared, in the webhook's namespace.
	anchors, err := ledger.ListAnchors(ctx, newClient(t, env.api.Config), ledgerNamespace)
	if err != nil {
		t.Fatal(err)
	}
	anchored := false
	for _, a := range anchors {
		anchored = anchored || (a.Job == job.Name && a.Head == corpus.AuditHead && a.RequestID == job.Labels[contract.LabelRequestID])
	}
	if !anchored {
		t.Errorf("no audit anchor for the safe Job %s among %+v", job.Name, anchors)
	}

	cases := env.corpus.All(job, pod)
	if len(cases) < 100 {
		t.Errorf("the corpus has %d cases, want at least 100", len(cases))
	}
	passed := 0
	for _, o := range corpus.Run(ctx, cases) {
		t.Run(o.Case.Class+"/"+o.Case.Name, func(t *testing.T) {
			if !o.Passed {
				t.Errorf("want refusal naming %q, got: %v", o.Case.Rule, o.Err)
				return
			}
			passed++
			if strings.Contains(o.Err.Error(), "\n") {
				t.Errorf("refusal is not one line: %q", o.Err)
			}
			t.Logf("refused: %v", o.Err)
		})
	}
	t.Logf("%d/%d unsafe objects and actions refused", passed, len(cases))
}

// TestWebhookAdmissionPlacement: with a policy placed as GKE places sandboxes (derived from the shipped one
// by agent-sandbox policy place, as make up PROFILE=gke does), the safe Job and its Pod carry GKE's node
// selector and toleration and are admitted, and every Job that leaves them out, changes them or tolerates
// more is refused by the webhook: no sandbox Job waits Pending behind the taint.
func TestWebhookAdmissionPlacement(t *testing.T) {
	placed := filepath.Join(t.TempDir(), "policy.yaml")
	var out, errOut bytes.Buffer
	if code := app.Main(context.Background(), []string{"policy", "place", "--policy", "../../policy/policy.yaml",
		"--node-selector", "sandbox.gke.io/runtime=gvisor", "--toleration", "sandbox.gke.io/runtime=gvisor:NoSchedule", "--out", placed},
		strings.NewReader(""), &out, &errOut); code != 0 {
		t.Fatalf("policy place: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	env := startWebhookEnvWith(t, placed)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	defer env.corpus.Cleanup(context.Background())

	_, pod := env.safeJobPod(t, ctx)
	gke := corev1.Toleration{Key: "sandbox.gke.io/runtime", Operator: corev1.TolerationOpEqual, Value: "gvisor", Effect: corev1.TaintEffectNoSchedule}
	if pod.Spec.NodeSelector["sandbox.gke.io/runtime"] != "gvisor" || !slices.Contains(pod.Spec.Tolerations, gke) {
		t.Fatalf("the safe Job's Pod is not placed on the gVisor nodes: nodeSelector %v, tolerations %v", pod.Spec.NodeSelector, pod.Spec.Tolerations)
	}
	cases := env.corpus.PlacementCases()
	if len(cases) != 8 {
		t.Errorf("%d placement cases, want 8 (2 under any policy, 6 for a policy with a node selector and a toleration)", len(cases))
	}
	passed := 0
	for _, o := range corpus.Run(ctx, cases) {
		t.Run(o.Case.Name, func(t *testing.T) {
			if !o.Passed {
				t.Errorf("want refusal naming %q, got: %v", o.Case.Rule, o.Err)
				return
			}
			passed++
			t.Logf("refused: %v", o.Err)
		})
	}
	t.Logf("%d/%d placement cases refused", passed, len(cases))
}

// TestWebhookTokenOnlyForAdmittedPods: a tool ServiceAccount's Vault-audience token goes to the kubelet
// of a Pod the webhook admitted, and not to the kubelet of a Pod that only looks like one. The control: the
// safe Job's Pod, bound to a node by the scheduler (the webhook admits the Binding), gets its token from
// that node's kubelet, the Pod read back from the real API server compared with its Job's rendering. The
// case: a Pod with a sandbox Pod's tool label, injected annotation and ServiceAccount, on the same node but
// running another image and owned by nothing, made while the namespace was not under the webhook (as
// during an install, before the webhook configurations exist, or between an uninstall and a reinstall;
// here the chart's identity takes the namespace's selector label off for the moment of its creation). Its
// kubelet's TokenRequest must be refused by the webhook.
func TestWebhookTokenOnlyForAdmittedPods(t *testing.T) {
	env := startWebhookEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	defer env.corpus.Cleanup(context.Background())
	ns := env.corpus.Namespace()
	tool, err := env.corpus.Policy.Tool("k8s_get_pod_status")
	if err != nil {
		t.Fatal(err)
	}
	vault := env.corpus.Policy.Spec.Sandbox.CredentialAgent.VaultAudience
	node := corpus.NodeWithoutPods
	kubelet := env.corpus.Node(node)
	token := func(pod *corev1.Pod) error {
		_, err := kubelet.CoreV1().ServiceAccounts(ns).CreateToken(ctx, tool.ServiceAccount, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			Audiences: []string{vault}, ExpirationSeconds: ptr.To(int64(3600)),
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}}}, metav1.CreateOptions{})
		return err
	}

	_, pod := env.safeJobPod(t, ctx)
	if err := env.corpus.Scheduler().CoreV1().Pods(ns).Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod.Name},
		Target: corev1.ObjectReference{Kind: "Node", Name: node}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the scheduler's Binding of the safe Job's Pod: %v", err)
	}
	if err := token(pod); err != nil {
		t.Fatalf("control: the kubelet's token for the admitted, bound Pod was refused: %v", err)
	}

	restore := env.openGap(t)
	forged := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "forged-sandbox-pod", Namespace: ns,
		Labels:      map[string]string{contract.LabelTool: tool.Name},
		Annotations: map[string]string{contract.AnnotationInjected: "true"}},
		Spec: corev1.PodSpec{ServiceAccountName: tool.ServiceAccount, AutomountServiceAccountToken: ptr.To(false), NodeName: node,
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(int64(65532)), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{Name: contract.ToolContainer, Image: "registry.invalid/attacker:latest", Command: []string{"sh", "-c", "cat /var/run/secrets/vault/token"},
				SecurityContext: sandbox.HardenedContainerSecurityContext()}}}}
	forged, err = env.corpus.Admin.CoreV1().Pods(ns).Create(ctx, forged, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create the look-alike Pod while the namespace is not under the webhook: %v", err)
	}
	// And a Job that is the exact rendering of a call, injected as the webhook would, whose Pod the Job
	// controller makes while no webhook looks: the exact Pod of an exact Job, which only the webhook's Pod
	// ledger tells from an admitted one.
	unseenJob, err := env.corpus.Admin.BatchV1().Jobs(ns).Create(ctx, env.corpus.Injected("k8s_get_pod_status", corpus.PodParams()), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create the exact Job while the namespace is not under the webhook: %v", err)
	}
	unseen, err := env.corpus.WaitForPod(ctx, unseenJob)
	if err != nil {
		t.Fatal(err)
	}
	restore()
	if err := env.corpus.Scheduler().CoreV1().Pods(ns).Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: unseen.Name},
		Target: corev1.ObjectReference{Kind: "Node", Name: node}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the scheduler's Binding of the unseen Job's Pod: %v", err)
	}

	err = token(forged)
	if !corpus.Refused(err, "token-request") {
		t.Fatalf("the kubelet's Vault-audience token for a Pod the webhook never admitted: %v; want a refusal naming token-request", err)
	}
	t.Logf("refused: %v", err)
	err = token(unseen)
	if !corpus.Refused(err, "token-request") || !strings.Contains(err.Error(), "never admitted a Pod of Job") {
		t.Fatalf("the kubelet's Vault-audience token for the exact Pod of a Job the webhook never saw: %v; want a refusal by its Pod ledger", err)
	}
	t.Logf("refused: %v", err)
}

// openGap takes the sandbox namespace's selector label off, as the chart's identity, so that no webhook but
// the namespace's own is called there (as during an install, or between an uninstall and a reinstall), and
// returns what puts it back; the test's cleanup puts it back too if the test ends first.
func (env *webhookEnv) openGap(t *testing.T) (restore func()) {
	t.Helper()
	ns := env.corpus.Namespace()
	label := func(value string) {
		t.Helper()
		patch := `{"metadata":{"labels":{"` + contract.LabelSandboxNamespace + `":` + value + `}}}`
		if _, err := env.corpus.Admin.CoreV1().Namespaces().Patch(context.Background(), ns, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatalf("set the sandbox namespace's label to %s: %v", value, err)
		}
	}
	label("null")
	restored := false
	t.Cleanup(func() {
		if !restored {
			label(`"true"`)
		}
	})
	return func() { label(`"true"`); restored = true }
}

// TestWebhookApprovalRace: 8 Jobs carrying one approval race through admission; exactly one is admitted.
func TestWebhookApprovalRace(t *testing.T) {
	env := startWebhookEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admitted, errs := env.corpus.Race(ctx, 8)
	if admitted != 1 {
		t.Fatalf("admitted %d Jobs with one approval, want exactly 1 (errors: %v)", admitted, errs)
	}
	for _, err := range errs {
		if !corpus.Refused(err, "already used") {
			t.Errorf("loser refused for the wrong reason: %v", err)
		}
	}
	// The ledger holds exactly one entry for the token (and one for the admitted Job's Pod).
	cms, err := env.api.Clientset.CoreV1().ConfigMaps(ledgerNamespace).List(ctx, metav1.ListOptions{LabelSelector: contract.LabelApprovalLedger + "=true"})
	approvals := 0
	for _, cm := range cms.Items {
		if strings.HasPrefix(cm.Name, "approval-") {
			approvals++
		}
	}
	if err != nil || approvals != 1 {
		t.Fatalf("approval ledger entries: %v, %v", approvals, err)
	}
}

// TestWebhookDryRunConsumesNothing: two server-side dry runs with a good token, then the real create is
// still admitted.
func TestWebhookDryRunConsumesNothing(t *testing.T) {
	env := startWebhookEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := env.corpus.DryRunThenCreate(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestWebhookFailClosed: with the webhook process stopped, a sandbox Job is rejected (failurePolicy Fail),
// while other namespaces are unaffected.
func TestWebhookFailClosed(t *testing.T) {
	env := startWebhookEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := env.corpus.SafeJob(ctx, true); err != nil {
		t.Fatalf("with the webhook up: %v", err)
	}
	// What the chart's helm test checks, against the real API server: an unsafe Job is refused by the
	// webhook while it is up, and "cannot call the webhook" is told apart from a denial once it is down.
	names := chartWebhookNames()
	jobs := env.corpus.Attacker.BatchV1().Jobs(env.corpus.Namespace())
	if denial, err := installcheck.CheckDeniesUnsafeJob(ctx, jobs, env.corpus.Namespace(), "registry.invalid/x", names); err != nil {
		t.Errorf("check-install's unsafe Job with the webhook up: %v", err)
	} else {
		t.Logf("check-install's unsafe Job: %s", denial)
	}
	env.hook.Stop()
	if _, err := installcheck.CheckDeniesUnsafeJob(ctx, jobs, env.corpus.Namespace(), "registry.invalid/x", names); !errors.Is(err, installcheck.ErrUnreachable) {
		t.Errorf("check-install's unsafe Job with the webhook down = %v, want ErrUnreachable", err)
	}
	_, err := env.corpus.CreateJob(ctx, env.corpus.Job("k8s_get_pod_status", corpus.PodParams(), ""), false)
	if err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
		t.Fatalf("with the webhook stopped, a sandbox Job was not rejected by the webhook failure policy: %v", err)
	}
	t.Logf("rejected while the webhook is down: %v", err)
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "unaffected", Namespace: "demo-app"}}
	if _, err := env.corpus.Attacker.CoreV1().ConfigMaps("demo-app").Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatalf("objects outside sandbox namespaces must not depend on the webhook: %v", err)
	}
}

// TestWebhookDownUsesNoApproval: with the webhook stopped (a restart, an upgrade), the MCP server's runner
// submits an approved terraform_apply Job. The real API server refuses it at the Job mutating webhook, which
// it calls before any validating webhook, so the ledger never saw the token: the runner says the approval
// was not used (sandbox.ApprovalsUnused: the MCP server gives the human's grant back instead of asking for a
// new one), and once the webhook is back the very token admits the call's Job, once. A Job the validating
// webhook saw is not given back: its token may have been recorded.
func TestWebhookDownUsesNoApproval(t *testing.T) {
	env := startWebhookEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	defer env.corpus.Cleanup(context.Background())
	tok := env.corpus.Token(env.corpus.Approver, "terraform_apply", corpus.ApplyParams(), nil)
	job := env.corpus.Job("terraform_apply", corpus.ApplyParams(), tok)
	runner := sandbox.NewRunner(env.corpus.MCP, env.corpus.Namespace(), 1)

	env.hook.Stop()
	_, err := runner.Run(ctx, job.DeepCopy(), nil)
	if !sandbox.ApprovalsUnused(err) || !errors.Is(err, sandbox.ErrWebhookDown) {
		t.Fatalf("the approved Job with the webhook down: %v; want the webhook down and the approval unused", err)
	}
	t.Logf("with the webhook down: %v", err)

	env.hook.Restart(t)
	if _, err := env.corpus.CreateJob(ctx, job.DeepCopy(), false); err != nil {
		t.Fatalf("the webhook back, the call's Job with the very token was refused: %v", err)
	}
	again := env.corpus.Job("terraform_apply", corpus.ApplyParams(), tok)
	_, err = runner.Run(ctx, again, nil)
	if !corpus.Refused(err, "already used") || sandbox.ApprovalsUnused(err) {
		t.Fatalf("the token used a second time: %v; want a replay, not given back", err)
	}
}

// TestExpectationMatchesAPIDefaults creates every tool's rendered Job as a server-side dry run in a
// namespace the webhook does not guard, and compares what the real API server makes of it (defaults, the
// generated selector and labels) with the webhook's expectation: a default that a new Kubernetes version
// adds shows up here as the field's path.
func TestExpectationMatchesAPIDefaults(t *testing.T) {
	api := harness.StartAPIServer(t)
	p, err := policy.LoadFile("../../policy/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	unguarded := "defaults-probe"
	if _, err := api.Clientset.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: unguarded}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	key, _ := approval.GenerateKey("defaults")
	env := &corpus.Env{Policy: p, Approver: key}
	for _, tc := range []struct {
		tool   string
		params map[string]any
		token  bool
	}{
		{"k8s_get_pod_status", corpus.PodParams(), false},
		{"k8s_get_pod_status", map[string]any{"namespace": "demo-app", "label_selector": "app=web"}, false},
		{"terraform_plan", map[string]any{"workspace": "k8s-demo", "source": "tfws-0123456789abcdef0123"}, false},
		{"terraform_apply", corpus.ApplyParams(), true},
	} {
		tok := ""
		if tc.token {
			tok = env.Token(key, tc.tool, tc.params, nil)
		}
		j := env.Injected(tc.tool, tc.params)
		if tok != "" {
			j = env.Job(tc.tool, tc.params, tok)
			tl, _ := p.Tool(tc.tool)
			inv, _ := tl.Invoke(tc.params)
			webhook.Inject(&j.Spec.Template.ObjectMeta, &j.Spec.Template.Spec, p, inv)
		}
		j.Namespace = unguarded
		got, err := api.Clientset.BatchV1().Jobs(unguarded).Create(ctx, j, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			t.Fatalf("%s: %v", tc.tool, err)
		}
		got.APIVersion, got.Kind = "batch/v1", "Job" // typed clients drop them; the API server sends them
		raw, err := json.Marshal(got)
		if err != nil {
			t.Fatal(err)
		}
		if err := webhook.CompareWithRendering(p, raw, unguarded); err != nil {
			t.Errorf("%s: the API server's Job differs from the webhook's expectation: %v", tc.tool, err)
		}
	}
}
