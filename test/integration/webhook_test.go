//go:build integration

package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	batchv1 "k8s.io/api/batch/v1"

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/test/corpus"
	"github.com/agent-sandbox/agent-sandbox/test/harness"
	"github.com/agent-sandbox/agent-sandbox/webhook"
)

const ledgerNamespace = "agent-sandbox-system"

// webhookEnv is a real kube-apiserver (with the Job controller) and the webhook registered with it.
type webhookEnv struct {
	api      *harness.APIServer
	hook     *harness.Webhook
	corpus   *corpus.Env
	other    *approval.PrivateKey
	attacker kubernetes.Interface
}

func startWebhookEnv(t *testing.T) *webhookEnv {
	t.Helper()
	api := harness.StartAPIServer(t, harness.WithControllerManager("job", "serviceaccount-token", "root-ca-cert-publisher"))
	p, err := policy.LoadFile("../../policy/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cs := api.Clientset
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: p.Spec.Sandbox.Namespace, Labels: map[string]string{
			contract.LabelSandboxNamespace: "true", "pod-security.kubernetes.io/enforce": "restricted"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "demo-app"}},
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
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: tool.ServiceAccount}, AutomountServiceAccountToken: new(bool)}
		if _, err := cs.CoreV1().ServiceAccounts(p.Spec.Sandbox.Namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	key, err := approval.GenerateKey("integration-approver")
	if err != nil {
		t.Fatal(err)
	}
	other, _ := approval.GenerateKey("untrusted-approver")
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	direct, err := client.New(api.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	checker := &webhook.Checker{
		Ledger: &webhook.ConfigMapLedger{Client: direct, Namespace: ledgerNamespace},
		Jobs:   apiJobs{direct},
		// The harness's controller-manager authenticates as the admin user.
		JobControllerUsers: []string{"harness-admin"},
	}
	checker.SetPolicy(p)
	checker.SetKeys(key.KeySet())
	hook := harness.StartWebhook(t, api, checker)

	// The attacker bypasses the MCP server: a cluster-admin of its own, not the Job controller.
	attacker, err := api.Env.AddUser(envtest.User{Name: "mallory", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	acs, err := kubernetes.NewForConfig(attacker.Config())
	if err != nil {
		t.Fatal(err)
	}
	return &webhookEnv{api: api, hook: hook, other: other, attacker: acs,
		corpus: &corpus.Env{Policy: p, Approver: key, Client: acs, Run: "it"}}
}

type apiJobs struct{ c client.Client }

func (j apiJobs) GetJob(ctx context.Context, ns, name string) (*batchv1.Job, error) {
	var job batchv1.Job
	err := j.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &job)
	return &job, err
}

// TestWebhookAdmissionCorpus submits the whole adversarial corpus directly to a real kube-apiserver: the
// safe Job is admitted and mutated, every unsafe object and action is refused with its rule named.
func TestWebhookAdmissionCorpus(t *testing.T) {
	env := startWebhookEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	job, err := env.corpus.SafeJob(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	pod, err := env.corpus.WaitForPod(ctx, job)
	if err != nil {
		t.Fatalf("the Job controller's Pod for the safe Job: %v", err)
	}
	if pod.Annotations[contract.AnnotationInjected] != "true" || len(pod.Spec.InitContainers) != 1 {
		t.Fatalf("the safe Job's Pod lacks the credential agent: %+v", pod.Spec.InitContainers)
	}

	cases := append(env.corpus.Unsafe(env.other), env.corpus.PodActions(job, pod)...)
	for _, o := range corpus.Run(ctx, cases) {
		t.Run(o.Case.Name, func(t *testing.T) {
			if !o.Passed {
				t.Errorf("want refusal naming %q, got: %v", o.Case.Rule, o.Err)
				return
			}
			if strings.Contains(o.Err.Error(), "\n") {
				t.Errorf("refusal is not one line: %q", o.Err)
			}
			t.Logf("refused: %v", o.Err)
		})
	}
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
	// The ledger holds exactly one entry for the token.
	cms, err := env.api.Clientset.CoreV1().ConfigMaps(ledgerNamespace).List(ctx, metav1.ListOptions{LabelSelector: contract.LabelApprovalLedger + "=true"})
	if err != nil || len(cms.Items) != 1 {
		t.Fatalf("ledger entries: %v, %v", len(cms.Items), err)
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
	env.hook.Stop()
	_, err := env.corpus.CreateJob(ctx, env.corpus.Job("k8s_get_pod_status", corpus.PodParams(), ""), false)
	if err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
		t.Fatalf("with the webhook stopped, a sandbox Job was not rejected by the webhook failure policy: %v", err)
	}
	t.Logf("rejected while the webhook is down: %v", err)
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "unaffected", Namespace: "demo-app"}}
	if _, err := env.attacker.CoreV1().ConfigMaps("demo-app").Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatalf("objects outside sandbox namespaces must not depend on the webhook: %v", err)
	}
}
