// Command admission measures what the webhook costs on the admission path: server-side dry-run Job creates
// through a real kube-apiserver at concurrency 1, 16 and 64, for (a) a namespace with no admission, (b) the
// sandbox namespace guarded by the agent-sandbox webhook, (c) a namespace guarded by the same isolation
// rules as a native ValidatingAdmissionPolicy. It prints p50/p99 latency and requests per second; it
// asserts nothing. Run it with `make bench-admission` (KUBEBUILDER_ASSETS set by the script).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/agent-sandbox/agent-sandbox/bench/percentile"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/test/harness"
	"github.com/agent-sandbox/agent-sandbox/webhook"
)

func main() {
	policyFile := flag.String("policy", "policy/policy.yaml", "policy whose rules are measured")
	requests := flag.Int("requests", 600, "requests per (mode, concurrency)")
	flag.Parse()
	if err := run(*policyFile, *requests); err != nil {
		fmt.Fprintf(os.Stderr, "bench-admission: %v\n", err)
		os.Exit(1)
	}
}

func run(policyFile string, requests int) error {
	p, err := policy.LoadFile(policyFile)
	if err != nil {
		return err
	}
	env := &envtest.Environment{ControlPlaneStartTimeout: 90 * time.Second}
	cfg, err := env.Start()
	if err != nil {
		return fmt.Errorf("start kube-apiserver (KUBEBUILDER_ASSETS=%s): %w", os.Getenv("KUBEBUILDER_ASSETS"), err)
	}
	defer func() { _ = env.Stop() }()
	cfg.QPS, cfg.Burst = 5000, 5000
	cfg.WarningHandler = rest.NoWarnings{}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx := context.Background()
	sandboxNS := p.Spec.Sandbox.Namespace
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: "bench-plain"}},
		{ObjectMeta: metav1.ObjectMeta{Name: sandboxNS, Labels: map[string]string{"agent-sandbox.dev/sandbox": "true"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "bench-vap", Labels: map[string]string{"bench-vap": "true"}}},
	} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	if _, err := cs.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "gvisor"}, Handler: "runsc"}, metav1.CreateOptions{}); err != nil {
		return err
	}
	stop, err := startWebhook(cs, p)
	if err != nil {
		return err
	}
	defer stop()
	if err := installVAP(ctx, cs, p); err != nil {
		return err
	}

	tool, _ := p.Tool("k8s_get_pod_status")
	inv, err := tool.Invoke(map[string]any{"namespace": "demo-app"})
	if err != nil {
		return err
	}
	// Every admission is a dry run, so the audit head is only checked for its form, never recorded.
	job, err := sandbox.RenderJob(p, sandbox.JobSpec{Invocation: inv, RequestID: "req-benchbenchbe", AuditHead: strings.Repeat("be", 32)})
	if err != nil {
		return err
	}
	injected := job.DeepCopy()
	webhook.Inject(&injected.Spec.Template.ObjectMeta, &injected.Spec.Template.Spec, p, inv)

	modes := []struct {
		name, ns string
		job      *batchv1.Job
	}{
		{"(a) no admission", "bench-plain", injected},
		{"(b) agent-sandbox webhook", sandboxNS, job},
		{"(c) ValidatingAdmissionPolicy", "bench-vap", injected},
	}
	// Warm up every path (CEL compilation in the API server, connections, the webhook's caches).
	for _, m := range modes {
		if err := createDryRun(ctx, cs, m.ns, m.job); err != nil {
			return fmt.Errorf("%s: the safe Job was refused: %w", m.name, err)
		}
		for i := 0; i < 50; i++ {
			_ = createDryRun(ctx, cs, m.ns, m.job)
		}
	}
	fmt.Printf("Job create, server-side dry run, through a real kube-apiserver (envtest); %d requests per row; %s\n", requests, time.Now().Format(time.RFC3339))
	fmt.Printf("%-32s %5s %10s %10s %10s\n", "mode", "conc", "p50", "p99", "req/s")
	base := map[int]time.Duration{}
	for _, conc := range []int{1, 16, 64} {
		for _, m := range modes {
			lat, total, errs := load(ctx, cs, m.ns, m.job, conc, requests)
			if errs > 0 {
				return fmt.Errorf("%s at %d: %d requests failed", m.name, conc, errs)
			}
			p50, p99 := percentile.Of(lat, 50), percentile.Of(lat, 99)
			extra := ""
			if m.ns == "bench-plain" {
				base[conc] = p99
			} else {
				extra = fmt.Sprintf("  (p99 overhead %+.2f ms)", float64(p99-base[conc])/1e6)
			}
			fmt.Printf("%-32s %5d %10s %10s %10.0f%s\n", m.name, conc, ms(p50), ms(p99), float64(len(lat))/total.Seconds(), extra)
		}
	}
	return nil
}

func createDryRun(ctx context.Context, cs kubernetes.Interface, ns string, j *batchv1.Job) error {
	// The rendered name: the webhook admits only what the policy renders (a dry run stores nothing, so
	// every request may use it).
	c := j.DeepCopy()
	c.Namespace = ns
	_, err := cs.BatchV1().Jobs(ns).Create(ctx, c, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	return err
}

func load(ctx context.Context, cs kubernetes.Interface, ns string, j *batchv1.Job, conc, n int) ([]time.Duration, time.Duration, int) {
	var mu sync.Mutex
	lat := make([]time.Duration, 0, n)
	errs := 0
	next := make(chan struct{}, n)
	for i := 0; i < n; i++ {
		next <- struct{}{}
	}
	close(next)
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range next {
				t := time.Now()
				err := createDryRun(ctx, cs, ns, j)
				d := time.Since(t)
				mu.Lock()
				if err != nil {
					errs++
				} else {
					lat = append(lat, d)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return lat, time.Since(start), errs
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d)/1e6) }

// startWebhook serves the webhook in-process and registers it, as the integration tests do.
func startWebhook(cs kubernetes.Interface, p *policy.Compiled) (func(), error) {
	dir, err := os.MkdirTemp("", "bench-webhook")
	if err != nil {
		return nil, err
	}
	checker := &webhook.Checker{}
	checker.SetPolicy(p)
	w, err := harness.ServeWebhook(cs, checker, dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return func() { w.Stop(); os.RemoveAll(dir) }, nil
}

var varRE = regexp.MustCompile(`(^|[^.\w])(podSpec|podMetadata|containers|settings|kind)\b`)

// installVAP expresses the policy's isolation rules as one native ValidatingAdmissionPolicy: the same CEL,
// with podSpec, podMetadata, containers and settings as VAP variables.
func installVAP(ctx context.Context, cs kubernetes.Interface, p *policy.Compiled) error {
	// A CEL map literal needs values of one type: dyn() makes them so.
	settings := fmt.Sprintf(`{"runtimeClassName": dyn(%q), "maxDeadlineSeconds": dyn(%d), "vaultAudience": dyn(%q), "credentialVolume": dyn("agent-sandbox-credentials"), "vaultTokenVolume": dyn("agent-sandbox-vault-token"), "credentialAgentContainer": dyn("cred-agent"), "nodeSelector": dyn({}), "tolerations": dyn([])}`,
		p.Spec.Sandbox.RuntimeClassName, int64(p.Spec.Sandbox.MaxDeadline.Seconds()), p.Spec.Sandbox.CredentialAgent.VaultAudience)
	vap := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "agent-sandbox-isolation-bench"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{"batch"}, APIVersions: []string{"v1"}, Resources: []string{"jobs"}}}}}},
			Variables: []admissionregistrationv1.Variable{
				{Name: "podSpec", Expression: "object.spec.template.spec"},
				{Name: "podMetadata", Expression: "object.spec.template.metadata"},
				{Name: "containers", Expression: "object.spec.template.spec.?initContainers.orValue([]) + object.spec.template.spec.containers + object.spec.template.spec.?ephemeralContainers.orValue([])"},
				{Name: "settings", Expression: settings},
				{Name: "kind", Expression: "'Job'"},
			},
		},
	}
	for _, r := range p.Spec.AdmissionRules {
		expr := varRE.ReplaceAllString(r.Expression, "${1}variables.${2}")
		vap.Spec.Validations = append(vap.Spec.Validations, admissionregistrationv1.Validation{Expression: expr, Message: r.Name + ": " + r.Message})
	}
	if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, vap, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create ValidatingAdmissionPolicy: %w", err)
	}
	b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "agent-sandbox-isolation-bench"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: vap.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources:    &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"bench-vap": "true"}}}},
	}
	if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil {
		return err
	}
	// The binding takes effect once the API server's policy informer has it: wait for a refusal.
	bad := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-"}, Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "x"}}}}}}
	for i := 0; i < 100; i++ {
		_, err := cs.BatchV1().Jobs("bench-vap").Create(ctx, bad, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil && strings.Contains(err.Error(), "runtime-class") {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("the ValidatingAdmissionPolicy never took effect")
}
