//go:build integration

package integration

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app"
	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	approvalstore "github.com/agent-sandbox/agent-sandbox/internal/approval/store"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/tfcheck"
	"github.com/agent-sandbox/agent-sandbox/internal/toolrun"
	"github.com/agent-sandbox/agent-sandbox/test/corpus"
	"github.com/agent-sandbox/agent-sandbox/test/harness"
)

const (
	runnerNS        = "demo-app"
	runnerWorkspace = "k8s-demo"
	// runnerDemoLine is the line of terraform/k8s-demo/main.tf that the demo edits.
	runnerDemoLine = `track = "stable" # demo: change to "canary" to force replacement`
)

// runnerEnv is the shared state of TestRunner's steps. Every tool runs in process through app.Main with
// the argv the policy renders, against a real kube-apiserver, with the real terraform binary and the
// locally built provider, and with a credential bound to exactly the RBAC rules of the tool's scope in
// policy/policy.yaml, always at one kubeconfig path (as in the sandbox, where the credential agent
// writes each Job's credential to the same place).
type runnerEnv struct {
	api        *harness.APIServer
	admin      kubernetes.Interface
	creds      map[string][]byte // scope name -> kubeconfig
	kubeconfig string            // where the current credential is
	workspace  string            // a copy of terraform/k8s-demo laid out like a ConfigMap volume
	tmp        string            // TMPDIR of the runs
}

func TestRunner(t *testing.T) {
	ctx := context.Background()
	e := &runnerEnv{api: harness.StartAPIServer(t), creds: map[string][]byte{}}
	e.admin = e.api.Clientset
	dir := t.TempDir()
	runnerTerraformSetup(t, dir)
	e.tmp = filepath.Join(dir, "tmp")
	if err := os.Mkdir(e.tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", e.tmp)
	e.kubeconfig = filepath.Join(dir, "credentials", "kubeconfig")
	if err := os.Mkdir(filepath.Dir(e.kubeconfig), 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", e.kubeconfig)

	// demo-app as the local cluster has it: the demo's Terraform and the probe Pods below pass its Pod
	// Security level.
	if _, err := e.admin.CoreV1().Namespaces().Create(ctx, localNamespace(t, runnerNS), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pol, err := policy.LoadFile("../../policy/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, scope := range []string{"pod-reader", "terraform-plan", "terraform-apply"} {
		e.creds[scope] = e.scopedCredential(t, pol, scope)
	}
	e.workspace = runnerConfigMapVolume(t, filepath.Join(dir, "workspace"), map[string]string{
		// The bare API server runs no controllers: the Deployment never becomes ready.
		"ci.auto.tfvars": "wait_for_rollout = false\n",
	})

	steps := []struct {
		name string
		fn   func(*testing.T)
	}{
		{"PodStatus", e.testPodStatus},
		{"PlanAndApply", e.testPlanAndApply},
		{"ReplacementAndRefusals", e.testReplacementAndRefusals},
		{"PlanRules", e.testPlanRules},
		{"ApproveSeesTheTruth", e.testApproveSeesTheTruth},
		{"WorkspaceBackendRefused", e.testWorkspaceBackendRefused},
		{"MaliciousWorkspacesRefusedBeforeTerraform", e.testMaliciousWorkspaces},
	}
	for _, s := range steps {
		if !t.Run(s.name, s.fn) {
			t.FailNow()
		}
	}
	leftovers, _ := filepath.Glob(filepath.Join(e.tmp, "*"))
	if len(leftovers) > 0 {
		t.Errorf("working directories left behind: %v", leftovers)
	}
}

// runnerTerraformSetup checks for terraform, builds the provider mirror if needed and points
// TF_CLI_CONFIG_FILE at a CLI configuration that installs only from it (the environment's own setting
// names a file that may not exist).
func runnerTerraformSetup(t *testing.T, dir string) {
	t.Helper()
	if _, err := exec.LookPath("terraform"); err != nil {
		t.Fatalf("terraform is not on PATH (expected /usr/local/bin/terraform): %v", err)
	}
	mirror := os.Getenv("AGENT_SANDBOX_TF_PROVIDER_MIRROR")
	if mirror == "" {
		build := exec.Command("../../scripts/build-tools.sh", "terraform-provider-kubernetes")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("scripts/build-tools.sh terraform-provider-kubernetes: %v\n%s", err, out)
		}
		out, err := exec.Command("bash", "-c", ". ../../scripts/lib.sh && dir_tfprovider").Output()
		if err != nil {
			t.Fatalf("dir_tfprovider: %v", err)
		}
		mirror = strings.TrimSpace(string(out))
	}
	if _, err := os.Stat(filepath.Join(mirror, "registry.terraform.io/hashicorp/kubernetes/1.13.4/linux_amd64")); err != nil {
		t.Fatalf("provider mirror %s: %v", mirror, err)
	}
	rc := filepath.Join(dir, "terraform.rc")
	conf := "provider_installation {\n  filesystem_mirror {\n    path    = \"" + mirror + "\"\n" +
		"    include = [\"registry.terraform.io/hashicorp/kubernetes\"]\n  }\n}\ndisable_checkpoint = true\n"
	if err := os.WriteFile(rc, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TF_CLI_CONFIG_FILE", rc)
	t.Setenv("HOME", dir)
}

// scopedCredential makes a user bound to exactly the rules of one policy scope in the namespace, as
// Vault's Kubernetes secrets engine does for each action, and returns its kubeconfig.
func (e *runnerEnv) scopedCredential(t *testing.T, pol *policy.Compiled, scope string) []byte {
	t.Helper()
	ctx := context.Background()
	s := pol.Scope(scope)
	if s == nil {
		t.Fatalf("policy has no scope %s", scope)
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "scope-" + scope, Namespace: runnerNS}}
	for _, r := range s.Rules {
		role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: r.APIGroups, Resources: r.Resources, Verbs: r.Verbs, ResourceNames: r.ResourceNames})
	}
	if _, err := e.admin.RbacV1().Roles(runnerNS).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A ServiceAccount and a token, as Vault's secrets engine mints them per action.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "runner-" + scope, Namespace: runnerNS}}
	if _, err := e.admin.CoreV1().ServiceAccounts(runnerNS).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name, Namespace: runnerNS},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa.Name, Namespace: runnerNS}},
	}
	if _, err := e.admin.RbacV1().RoleBindings(runnerNS).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	secs := int64(3600)
	tr, err := e.admin.CoreV1().ServiceAccounts(runnerNS).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: e.api.URL, CertificateAuthorityData: e.api.CAPEM}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u", Namespace: runnerNS}
	cfg.CurrentContext = "c"
	kc, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return kc
}

// credentialToken is the token in a kubeconfig.
func credentialToken(t *testing.T, kubeconfig []byte) string {
	t.Helper()
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range cfg.AuthInfos {
		if a.Token != "" {
			return a.Token
		}
	}
	t.Fatal("the credential has no token")
	return ""
}

// runnerConfigMapVolume lays out terraform/k8s-demo plus extra files the way the kubelet writes a
// ConfigMap volume: the files in a timestamped folder, ..data linking to it, one link per key.
func runnerConfigMapVolume(t *testing.T, dir string, extra map[string]string) string {
	t.Helper()
	files := map[string]string{}
	src, err := filepath.Glob("../../terraform/k8s-demo/*")
	if err != nil || len(src) == 0 {
		t.Fatalf("terraform/k8s-demo: %v", err)
	}
	for _, p := range src {
		if !tfcheck.IsWorkspaceFile(filepath.Base(p)) {
			continue // the MCP server publishes Terraform files only (README.md stays behind)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		files[filepath.Base(p)] = string(data)
	}
	for k, v := range extra {
		files[k] = v
	}
	return harness.ConfigMapVolume(t, dir, files)
}

// use puts one scope's credential at the kubeconfig path.
func (e *runnerEnv) use(t *testing.T, scope string) {
	t.Helper()
	if err := os.Remove(e.kubeconfig); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.kubeconfig, e.creds[scope], 0o400); err != nil {
		t.Fatal(err)
	}
}

// run runs one tool in process with the scope's credential and checks the output contract: stdout is
// exactly one line, a JSON object. It returns the exit code and stdout.
func (e *runnerEnv) run(t *testing.T, scope string, args ...string) (int, []byte) {
	t.Helper()
	e.use(t, scope)
	var stdout, stderr bytes.Buffer
	start := time.Now()
	code := app.Main(context.Background(), append([]string{"run"}, args...), strings.NewReader(""), &stdout, &stderr)
	t.Logf("run %s: exit %d in %s", strings.Join(args, " "), code, time.Since(start).Round(10*time.Millisecond))
	if t.Failed() || code != 0 {
		t.Logf("stderr:\n%s", stderr.String())
	}
	if n := strings.Count(stdout.String(), "\n"); n != 1 || !strings.HasPrefix(stdout.String(), "{") {
		t.Errorf("stdout is not exactly one JSON line (%d lines): %.500s", n, stdout.String())
	}
	return code, stdout.Bytes()
}

// plan runs terraform-plan and keeps the saved plan where the apply Job would mount it (the ConfigMap
// tfplan-<plan ID> the MCP server stores).
func (e *runnerEnv) plan(t *testing.T) toolrun.PlanResult {
	t.Helper()
	code, out := e.run(t, "terraform-plan", "terraform-plan", "--workspace="+runnerWorkspace, "--source="+e.workspace, "--namespace="+runnerNS)
	res, err := toolrun.DecodeResult[toolrun.PlanResult](out)
	if code != 0 || err != nil {
		t.Fatalf("terraform-plan: exit %d: %v", code, err)
	}
	if toolrun.PlanID(res.Plan) != res.PlanID {
		t.Fatalf("the result's saved plan does not hash to its plan ID")
	}
	if err := os.WriteFile(e.planFile(res.PlanID), res.Plan, 0o444); err != nil {
		t.Fatal(err)
	}
	t.Logf("plan %s: %+v, %d bytes, timings %+v", res.PlanID[:16], res.Summary, len(res.Plan), res.Timings)
	return res
}

func (e *runnerEnv) planFile(planID string) string {
	return filepath.Join(e.tmp, "..", "plan-"+planID[:16])
}

func (e *runnerEnv) apply(t *testing.T, planID string) (int, toolrun.ApplyResult, error) {
	t.Helper()
	return e.applyFile(t, e.planFile(planID), planID)
}

func (e *runnerEnv) applyFile(t *testing.T, file, planID string) (int, toolrun.ApplyResult, error) {
	t.Helper()
	code, out := e.run(t, "terraform-apply", "terraform-apply", "--workspace="+runnerWorkspace, "--namespace="+runnerNS,
		"--plan-file="+file, "--plan-id="+planID)
	res, err := toolrun.DecodeResult[toolrun.ApplyResult](out)
	if err == nil {
		t.Logf("apply %s: %+v, timings %+v", planID[:16], res.Summary, res.Timings)
	}
	return code, res, err
}

func (e *runnerEnv) testPodStatus(t *testing.T) {
	ctx := context.Background()
	for i, name := range []string{"probe-b", "probe-a", "other"} {
		label := "probe"
		if i == 2 {
			label = "other"
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: runnerNS, Labels: map[string]string{"app": label}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{
				{Name: "one", Image: "localhost/busybox:agent-sandbox"}, {Name: "two", Image: "localhost/busybox:agent-sandbox"},
			}},
		}
		if _, err := e.admin.CoreV1().Pods(runnerNS).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// The pod-reader credential really is limited: RBAC is in force, so what passes below is enough.
	reader := e.clientFor(t, "pod-reader")
	if _, err := reader.CoreV1().Secrets(runnerNS).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("pod-reader lists secrets: %v", err)
	}

	code, out := e.run(t, "pod-reader", "pod-status", "--namespace="+runnerNS, "--selector=app=probe")
	res, err := toolrun.DecodeResult[toolrun.PodStatusResult](out)
	if code != 0 || err != nil {
		t.Fatalf("pod-status: exit %d: %v", code, err)
	}
	if res.Namespace != runnerNS || res.Selector != "app=probe" || len(res.Pods) != 2 {
		t.Fatalf("pod-status: %+v", res)
	}
	for i, want := range []string{"probe-a", "probe-b"} {
		p := res.Pods[i]
		if p.Name != want || p.Phase != "Pending" || p.Ready != "0/2" || p.Restarts != 0 || p.Node != "" || p.Age == "" || p.AgeSeconds < 0 {
			t.Errorf("pod %d: %+v", i, p)
		}
	}

	// An empty selector (the policy renders --selector= when none is given) lists every pod.
	code, out = e.run(t, "pod-reader", "pod-status", "--namespace="+runnerNS, "--selector=")
	if res, err = toolrun.DecodeResult[toolrun.PodStatusResult](out); code != 0 || err != nil || len(res.Pods) != 3 {
		t.Errorf("pod-status without selector: exit %d, %v, %+v", code, err, res)
	}

	code, out = e.run(t, "pod-reader", "pod-status", "--namespace="+runnerNS, "--selector=app==(")
	var te *toolrun.ToolError
	if _, err = toolrun.DecodeResult[toolrun.PodStatusResult](out); code != 1 || !errors.As(err, &te) || !strings.Contains(te.Message, "selector") {
		t.Errorf("bad selector: exit %d, %v", code, err)
	}

	// Another namespace is outside the credential.
	code, out = e.run(t, "pod-reader", "pod-status", "--namespace=kube-system")
	if _, err = toolrun.DecodeResult[toolrun.PodStatusResult](out); code != 1 || !errors.As(err, &te) || !strings.Contains(te.Message, "forbidden") {
		t.Errorf("kube-system: exit %d, %v", code, err)
	}
}

func (e *runnerEnv) testPlanAndApply(t *testing.T) {
	ctx := context.Background()
	p := e.plan(t)
	if !regexp.MustCompile(`^[a-f0-9]{64}$`).MatchString(p.PlanID) {
		t.Fatalf("plan id %q", p.PlanID)
	}
	if p.Summary != (toolrun.PlanSummary{Add: 2}) || len(p.Changes) != 2 || p.NoChanges || p.Workspace != runnerWorkspace {
		t.Fatalf("first plan: %+v %+v", p.Summary, p.Changes)
	}
	for _, c := range p.Changes {
		if len(c.Actions) != 1 || c.Actions[0] != "create" || c.Replace {
			t.Errorf("first plan change %+v", c)
		}
	}
	if !strings.Contains(p.Text, "Plan: 2 to add, 0 to change, 0 to destroy.") {
		t.Errorf("plan text: %s", p.Text)
	}

	// The plan changed nothing in the cluster: no state Secret, no lock (the plan credential could not
	// write them anyway: it may read the state Secret by name and nothing else of Secrets).
	if _, err := e.admin.CoreV1().Secrets(runnerNS).Get(ctx, "tfstate-default-"+runnerWorkspace, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a plan wrote the state: %v", err)
	}
	planner := e.clientFor(t, "terraform-plan")
	if _, err := planner.CoreV1().Secrets(runnerNS).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the plan credential lists Secrets: %v", err)
	}
	if _, err := planner.CoreV1().Secrets(runnerNS).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "planted"}}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the plan credential creates a Secret: %v", err)
	}
	if _, err := planner.CoreV1().Secrets(runnerNS).Get(ctx, "someone-elses", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the plan credential reads another Secret: %v", err)
	}
	if _, err := planner.CoordinationV1().Leases(runnerNS).Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "lock-tfstate-default-" + runnerWorkspace}}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the plan credential takes a lock: %v", err)
	}
	// The saved plan passes the allowlist it will be checked against again before the apply.
	if err := tfcheck.CheckPlan(p.Plan, toolrun.CheckOptions()); err != nil {
		t.Errorf("our own saved plan: %v", err)
	}

	code, a, err := e.apply(t, p.PlanID)
	if code != 0 || err != nil || !a.Applied || a.PlanID != p.PlanID || a.Summary != p.Summary {
		t.Fatalf("apply: exit %d, %v, %+v", code, err, a)
	}
	if !strings.Contains(a.Text, "Apply complete! Resources: 2 added, 0 changed, 0 destroyed.") {
		t.Errorf("apply text: %s", a.Text)
	}
	dep, err := e.admin.AppsV1().Deployments(runnerNS).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if dep.Spec.Selector.MatchLabels["track"] != "stable" || *dep.Spec.Replicas != 2 {
		t.Errorf("deployment: %+v", dep.Spec)
	}
	if _, err := e.admin.CoreV1().Services(runnerNS).Get(ctx, "web", metav1.GetOptions{}); err != nil {
		t.Error(err)
	}
	if _, err := e.admin.CoreV1().Secrets(runnerNS).Get(ctx, "tfstate-default-"+runnerWorkspace, metav1.GetOptions{}); err != nil {
		t.Errorf("state secret: %v", err)
	}
	if _, err := e.admin.CoordinationV1().Leases(runnerNS).Get(ctx, "lock-tfstate-default-"+runnerWorkspace, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the state lock was not released: %v", err)
	}

	// Applying the same plan again: the state has moved on, Terraform refuses it as stale.
	code, _, err = e.apply(t, p.PlanID)
	var te *toolrun.ToolError
	if code != 1 || !errors.As(err, &te) || !strings.Contains(te.Message, "stale") {
		t.Errorf("second apply of one plan: exit %d, %v", code, err)
	}

	// Nothing changed since: the provider sees no drift in what it created.
	if again := e.plan(t); !again.NoChanges || again.Summary != (toolrun.PlanSummary{}) || len(again.Changes) != 0 {
		t.Errorf("plan after apply: %+v %+v\n%s", again.Summary, again.Changes, again.Text)
	}
}

func (e *runnerEnv) testReplacementAndRefusals(t *testing.T) {
	ctx := context.Background()
	// The demo's one-line edit, made the way the kubelet updates a ConfigMap volume's file.
	mainTF, err := filepath.EvalSymlinks(filepath.Join(e.workspace, "main.tf"))
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(mainTF)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(src), runnerDemoLine) != 1 {
		t.Fatalf("main.tf lacks the marked demo line %q", runnerDemoLine)
	}
	edited := strings.Replace(string(src), runnerDemoLine, `track = "canary" # demo: change to "canary" to force replacement`, 1)
	if err := os.WriteFile(mainTF, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}

	first := e.plan(t)
	if first.Summary != (toolrun.PlanSummary{Add: 1, Destroy: 1, Replace: 1}) || len(first.Changes) != 1 {
		t.Fatalf("replacement plan: %+v %+v", first.Summary, first.Changes)
	}
	c := first.Changes[0]
	if c.Address != "kubernetes_deployment.web" || !c.Replace || strings.Join(c.Actions, ",") != "delete,create" || len(c.ReplacePaths) == 0 {
		t.Errorf("replacement change: %+v", c)
	}
	for _, want := range []string{"forces replacement", "must be replaced", "Plan: 1 to add, 0 to change, 1 to destroy."} {
		if !strings.Contains(first.Text, want) {
			t.Errorf("plan text lacks %q:\n%s", want, first.Text)
		}
	}
	before, err := e.admin.AppsV1().Deployments(runnerNS).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// A plan ID that differs from the saved plan's hash in one digit is refused before Terraform runs;
	// so is a plan file that is not there.
	wrong := first.PlanID[:63] + string("0123456789abcdef"[(strings.IndexByte("0123456789abcdef", first.PlanID[63])+1)%16])
	code, _, err := e.applyFile(t, e.planFile(first.PlanID), wrong)
	var te *toolrun.ToolError
	if code != 1 || !errors.As(err, &te) || !strings.Contains(te.Message, toolrun.ErrPlanMismatch.Error()) {
		t.Errorf("apply with a wrong plan id: exit %d, %v", code, err)
	}
	code, _, err = e.apply(t, strings.Repeat("ab", 32))
	if code != 1 || !errors.As(err, &te) || !strings.Contains(te.Message, "saved plan: open") {
		t.Errorf("apply with an unknown plan id: exit %d, %v", code, err)
	}

	// Stale plans: plan again, apply that second plan, then try the first.
	second := e.plan(t)
	if second.PlanID == first.PlanID {
		t.Fatal("two plans with one id")
	}
	code, a, err := e.apply(t, second.PlanID)
	if code != 0 || err != nil || !a.Applied || a.Summary != (toolrun.PlanSummary{Add: 1, Destroy: 1, Replace: 1}) {
		t.Fatalf("apply the second plan: exit %d, %v, %+v", code, err, a)
	}
	after, err := e.admin.AppsV1().Deployments(runnerNS).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.UID == before.UID || after.Spec.Selector.MatchLabels["track"] != "canary" {
		t.Errorf("deployment not replaced: uid %s -> %s, selector %v", before.UID, after.UID, after.Spec.Selector.MatchLabels)
	}
	code, _, err = e.apply(t, first.PlanID)
	if code != 1 || !errors.As(err, &te) || !strings.Contains(te.Message, "stale") {
		t.Errorf("apply a stale plan: exit %d, %v", code, err)
	}
	now, err := e.admin.AppsV1().Deployments(runnerNS).Get(ctx, "web", metav1.GetOptions{})
	if err != nil || now.UID != after.UID {
		t.Errorf("the stale plan changed the deployment: %v", err)
	}
	// The state lock is free again after every refusal.
	if _, err := e.admin.CoordinationV1().Leases(runnerNS).Get(ctx, "lock-tfstate-default-"+runnerWorkspace, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("state lock still held: %v", err)
	}
}

// tfCheck runs `run tf-check` in process as the apply Job's check container does (no credential at all) and
// returns its exit code and what it said.
func (e *runnerEnv) tfCheck(t *testing.T, args ...string) (int, string) {
	t.Helper()
	if err := os.Remove(e.kubeconfig); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	mirror := os.Getenv("AGENT_SANDBOX_TF_PROVIDER_MIRROR")
	if mirror == "" {
		out, err := exec.Command("bash", "-c", ". ../../scripts/lib.sh && dir_tfprovider").Output()
		if err != nil {
			t.Fatal(err)
		}
		mirror = strings.TrimSpace(string(out))
	}
	start := time.Now()
	code := app.Main(context.Background(), append([]string{"run", "tf-check", "--provider-mirror=" + mirror}, args...), strings.NewReader(""), &stdout, &stderr)
	t.Logf("tf-check: exit %d in %s", code, time.Since(start).Round(10*time.Millisecond))
	return code, stdout.String() + stderr.String()
}

// planWith runs terraform-plan on a workspace folder with the given extra flags, returning the exit code
// and the decoded result (or its error).
func (e *runnerEnv) planWith(t *testing.T, workspace string, flags ...string) (int, toolrun.PlanResult, error) {
	t.Helper()
	code, out := e.run(t, "terraform-plan", append([]string{"terraform-plan", "--workspace=" + runnerWorkspace,
		"--source=" + workspace, "--namespace=" + runnerNS}, flags...)...)
	res, err := toolrun.DecodeResult[toolrun.PlanResult](out)
	if err == nil {
		if werr := os.WriteFile(e.planFile(res.PlanID), res.Plan, 0o444); werr != nil {
			t.Fatal(werr)
		}
	}
	return code, res, err
}

// testPlanRules: the policy's plan rules, as the shipped policy renders them into the Jobs, judge real
// plans of real Terraform: issue 21's incident is refused in the plan sandbox, and — planned without the
// rules, approved — in the apply's check container, before any credential; the demo's own plan passes; a
// destroy needs two distinct approvers there.
func (e *runnerEnv) testPlanRules(t *testing.T) {
	ctx := context.Background()
	pol, err := policy.LoadFile("../../policy/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rules := "--plan-rules=" + pol.PlanRules.JSON()
	mainTF, err := os.ReadFile("../../terraform/k8s-demo/main.tf")
	if err != nil {
		t.Fatal(err)
	}
	// The Deployment as the last step left it (the demo's edit applied): the incident starts from there.
	inc, err := corpus.Incident()
	if err == nil {
		inc, err = inc.OnTrack("canary")
	}
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"ci.auto.tfvars": "wait_for_rollout = false\n"}
	for n, d := range inc.Files {
		files[n] = string(d)
	}
	ws := harness.ConfigMapVolume(t, filepath.Join(t.TempDir(), "ws"), files)
	before, err := e.admin.AppsV1().Deployments(runnerNS).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// In the plan sandbox: refused, with the rules and the resource named, and no saved plan.
	code, res, err := e.planWith(t, ws, rules)
	var te *toolrun.ToolError
	if code != 1 || !errors.As(err, &te) || !strings.Contains(te.Message, "plan refused by rule") || !strings.Contains(te.Message, "kubernetes_deployment.web") {
		t.Fatalf("the incident's plan: exit %d, %v, %+v", code, err, res.Summary)
	}
	if _, ok := inc.Matches(te.Message); !ok || !strings.Contains(te.Message, "plan-no-privileged") || !strings.Contains(te.Message, "plan-no-host-path") {
		t.Errorf("the refusal does not name the incident's rules (privileged, hostPath): %s", te.Message)
	}
	t.Logf("plan refused: %s", te.Message)

	// Planned without the rules (as a loosened or bypassed plan would be), approved by one person: the
	// check container refuses it before the credential agent would start.
	code, incident, err := e.planWith(t, ws)
	if code != 0 || err != nil || incident.Summary.Change != 1 {
		t.Fatalf("the incident planned without rules: exit %d, %v, %+v", code, err, incident.Summary)
	}
	code, said := e.tfCheck(t, "--plan-file="+e.planFile(incident.PlanID), "--plan-id="+incident.PlanID, rules, "--approvers=approver-1")
	if code != 1 || !strings.Contains(said, "plan-no-privileged") || !strings.Contains(said, "plan-no-host-path") {
		t.Fatalf("the check container admitted the incident's approved plan: exit %d\n%s", code, said)
	}
	// The same check without --plan-rules, as before this issue, admits it: the rules are what refuse it.
	if code, said := e.tfCheck(t, "--plan-file="+e.planFile(incident.PlanID), "--plan-id="+incident.PlanID); code != 0 {
		t.Fatalf("the allowlist alone refused the incident (it should not: it is not code): %s", said)
	}
	if now, _ := e.admin.AppsV1().Deployments(runnerNS).Get(ctx, "web", metav1.GetOptions{}); now.Generation != before.Generation {
		t.Errorf("the Deployment changed: generation %d -> %d", before.Generation, now.Generation)
	}

	// The demo's own workspace, as the last step left it, passes: a plan with no changes, one approver.
	demoWS := runnerConfigMapVolume(t, filepath.Join(t.TempDir(), "demo"), map[string]string{
		"main.tf":        strings.Replace(string(mainTF), runnerDemoLine, `track = "canary" # demo: change to "canary" to force replacement`, 1),
		"ci.auto.tfvars": "wait_for_rollout = false\n",
		// A ConfigMap to destroy below.
		"extra.tf": "resource \"kubernetes_config_map\" \"two_person\" {\n  metadata {\n    name      = \"two-person\"\n    namespace = var.namespace\n  }\n  data = { a = \"b\" }\n}\n",
	})
	code, add, err := e.planWith(t, demoWS, rules)
	if code != 0 || err != nil || add.ApprovalsRequired != 1 || add.Summary.Add != 1 {
		t.Fatalf("the demo's plan with a ConfigMap added: exit %d, %v, %+v (approvals %d)", code, err, add.Summary, add.ApprovalsRequired)
	}
	if code, said := e.tfCheck(t, "--plan-file="+e.planFile(add.PlanID), "--plan-id="+add.PlanID, rules); code != 1 || !strings.Contains(said, "0 of 1 approvals") {
		t.Errorf("a plan without approvers passed the check: exit %d\n%s", code, said)
	}
	if code, said := e.tfCheck(t, "--plan-file="+e.planFile(add.PlanID), "--plan-id="+add.PlanID, rules, "--approvers=approver-1"); code != 0 {
		t.Fatalf("the demo's approved plan was refused: %s", said)
	}
	if code, a, err := e.apply(t, add.PlanID); code != 0 || err != nil || !a.Applied {
		t.Fatalf("apply: exit %d, %v", code, err)
	}

	// Destroying it needs two distinct approvers (plan-destroy-needs-two-approvers).
	if err := os.Remove(filepath.Join(demoWS, "extra.tf")); err != nil {
		t.Fatal(err)
	}
	code, destroy, err := e.planWith(t, demoWS, rules)
	if code != 0 || err != nil || destroy.Summary.Destroy != 1 || destroy.ApprovalsRequired != 2 ||
		len(destroy.ApprovalRules) != 1 || destroy.ApprovalRules[0].Rule != "plan-destroy-needs-two-approvers" {
		t.Fatalf("destroy plan: exit %d, %v, %+v, approvals %d %+v", code, err, destroy.Summary, destroy.ApprovalsRequired, destroy.ApprovalRules)
	}
	for _, c := range []struct {
		approvers string
		ok        bool
	}{{"approver-1", false}, {"approver-1,approver-1", false}, {"approver-1,approver-2", true}} {
		code, said := e.tfCheck(t, "--plan-file="+e.planFile(destroy.PlanID), "--plan-id="+destroy.PlanID, rules, "--approvers="+c.approvers)
		if (code == 0) != c.ok || (!c.ok && !strings.Contains(said, "1 of 2 approvals")) {
			t.Errorf("destroy approved by %s: exit %d\n%s", c.approvers, code, said)
		}
	}
	if code, a, err := e.apply(t, destroy.PlanID); code != 0 || err != nil || !a.Applied {
		t.Fatalf("apply the destroy: exit %d, %v", code, err)
	}
}

// testApproveSeesTheTruth: a human approving a saved plan sees what the plan really does, computed by
// `agent-sandbox approve` from the plan itself (fetched from the cluster with the approver's own
// kubeconfig, SHA-256 checked, shown with terraform on this machine), and approve refuses a request whose
// description — written by the untrusted MCP server — says something else.
func (e *runnerEnv) testApproveSeesTheTruth(t *testing.T) {
	ctx := context.Background()
	// A destructive plan: undo the demo's edit, which replaces the Deployment again.
	mainTF, err := filepath.EvalSymlinks(filepath.Join(e.workspace, "main.tf"))
	if err != nil {
		t.Fatal(err)
	}
	src, _ := os.ReadFile(mainTF)
	if err := os.WriteFile(mainTF, []byte(strings.Replace(string(src), `track = "canary"`, `track = "stable"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	p := e.plan(t)
	if p.Summary.Replace != 1 {
		t.Fatalf("want a replacement plan, got %+v", p.Summary)
	}
	// The MCP server stores the saved plan in the sandbox namespace (here: the admin, as the test has no
	// MCP server).
	sandboxNS := "agent-sandbox"
	if _, err := e.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: sandboxNS}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	ws := &sandbox.Workspaces{Client: e.admin, Namespace: sandboxNS}
	if err := ws.EnsurePlan(ctx, p.PlanID, p.Plan); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	db := filepath.Join(dir, "approvals.db")
	keyPath := filepath.Join(dir, "approver.key")
	key, err := approval.GenerateKey("alice")
	if err != nil {
		t.Fatal(err)
	}
	if err := key.WriteFile(keyPath, []byte("correct horse battery"), approval.WithScryptWorkFactor(10)); err != nil {
		t.Fatal(err)
	}
	store, err := approvalstore.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	pol, err := policy.LoadFile("../../policy/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	signals := func(text string) []approval.Signal {
		var out []approval.Signal
		for _, m := range pol.DetectSignals(text) {
			out = append(out, approval.Signal{Name: m.Name, Match: m.Line})
		}
		return out
	}
	request := func(description string, sig []approval.Signal) *approval.Request {
		tool, _ := pol.Tool("terraform_apply")
		inv, err := tool.Invoke(map[string]any{"workspace": runnerWorkspace, "plan_id": p.PlanID})
		if err != nil {
			t.Fatal(err)
		}
		id, _ := approval.NewRequestID()
		r, err := store.CreateRequest(ctx, approval.Request{ID: id, Tool: inv.Tool.Name, Params: inv.Params, Namespace: inv.TargetNamespace,
			PlanDigest: inv.PlanDigest, PlanSummary: description, Signals: sig, ExpiresAt: time.Now().Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	honest := request(toolrun.DescribePlan(p.PlanID, p.Summary, p.Changes), signals(p.Text))
	// What a compromised MCP server would file: the plan's ID, and a harmless story.
	lying := request(toolrun.DescribePlan(p.PlanID, toolrun.PlanSummary{Add: 1}, []toolrun.ResourceChange{{Address: "kubernetes_config_map.notes", Actions: []string{"create"}}}), nil)

	approve := func(id string) (int, string) {
		// Read every page of the screen, as a person would.
		s := harness.StartTestTerminal(t, func(tty *os.File) int {
			return app.Main(ctx, []string{"approve", id, "--db", db, "--key", keyPath, "--policy", "../../policy/policy.yaml",
				"--kubeconfig", e.api.KubeconfigPath, "--provider-mirror", os.Getenv("AGENT_SANDBOX_TF_PROVIDER_MIRROR")}, tty, tty, tty)
		}, harness.TurnPages())
		if s.Shows(`or "yes": `) {
			// Do not approve: answer something else, which leaves the request pending.
			s.Send("no\n")
		}
		code := s.Wait()
		return code, s.Output()
	}

	code, shown := approve(honest.ID)
	t.Logf("approve of the honest request: exit %d\n%s", code, shown)
	for _, want := range []string{"WHAT THE PLAN DOES", "!! delete,create", "kubernetes_deployment.web", "DESTRUCTIVE SIGNALS", "forces-replacement", `or "yes": `} {
		if !strings.Contains(shown, want) {
			t.Errorf("approve of the honest request did not show %q", want)
		}
	}
	if strings.Contains(shown, "IS FALSE") {
		t.Error("the honest description was called false")
	}

	code, shown = approve(lying.ID)
	t.Logf("approve of the lying request: exit %d\n%s", code, shown)
	if code != 4 || !strings.Contains(shown, "THE REQUEST'S DESCRIPTION OF THIS PLAN IS FALSE") || !strings.Contains(shown, "!! delete,create") {
		t.Errorf("approve of a request that lies about its plan: exit %d", code)
	}
	if strings.Contains(shown, `or "yes": `) || strings.Contains(shown, "Passphrase") {
		t.Error("approve asked to confirm a request that lies about its plan")
	}
	for _, r := range []*approval.Request{honest, lying} {
		if got, _ := store.Get(ctx, r.ID); got == nil || got.Status != approval.StatusPending {
			t.Errorf("request %s is no longer pending", r.ID)
		}
	}
}

// A workspace that declares its own backend is refused before Terraform runs: the runner owns the state.
func (e *runnerEnv) testWorkspaceBackendRefused(t *testing.T) {
	stolen := filepath.Join(t.TempDir(), "stolen.tfstate")
	ws := runnerConfigMapVolume(t, filepath.Join(t.TempDir(), "workspace"), map[string]string{
		"ci.auto.tfvars": "wait_for_rollout = false\n",
		"backend.tf":     "terraform {\n  backend \"local\" {\n    path = \"" + stolen + "\"\n  }\n}\n",
	})
	code, out := e.run(t, "terraform-plan", "terraform-plan", "--workspace="+runnerWorkspace, "--source="+ws, "--namespace="+runnerNS)
	_, err := toolrun.DecodeResult[toolrun.PlanResult](out)
	var te *toolrun.ToolError
	if code != 1 || !errors.As(err, &te) || !strings.Contains(te.Message, "backend") {
		t.Fatalf("plan with a workspace backend: exit %d, %v", code, err)
	}
	if _, err := os.Stat(stolen); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the workspace's own backend was used: %v", err)
	}
}

// testMaliciousWorkspaces runs the whole malicious-workspace corpus (internal/tfcheck) through the real
// terraform-plan tool with the plan credential: every one is refused before Terraform starts — no
// working directory is made, nothing is read from or written to the cluster — and no output carries the
// credential.
func (e *runnerEnv) testMaliciousWorkspaces(t *testing.T) {
	cases, err := tfcheck.Corpus("../../internal/tfcheck/testdata")
	if err != nil {
		t.Fatal(err)
	}
	token := credentialToken(t, e.creds["terraform-plan"])
	n := 0
	for _, c := range cases {
		if !c.Malicious {
			continue
		}
		n++
		dir := filepath.Join(t.TempDir(), "ws")
		files := map[string]string{}
		for name, data := range c.Files {
			files[name] = string(data)
		}
		ws := harness.ConfigMapVolume(t, dir, files)
		var stdout, stderr bytes.Buffer
		e.use(t, "terraform-plan")
		code := app.Main(context.Background(), []string{"run", "terraform-plan", "--workspace=" + runnerWorkspace, "--source=" + ws, "--namespace=" + runnerNS},
			strings.NewReader(""), &stdout, &stderr)
		_, derr := toolrun.DecodeResult[toolrun.PlanResult](stdout.Bytes())
		var te *toolrun.ToolError
		if code != 1 || !errors.As(derr, &te) || !strings.Contains(te.Message, "refused") {
			t.Errorf("%s: exit %d, %v", c.Name, code, derr)
		}
		if strings.Contains(stderr.String(), "terraform init") || strings.Contains(stderr.String(), "Initializing") {
			t.Errorf("%s: terraform ran", c.Name)
		}
		if token != "" && (strings.Contains(stdout.String(), token) || strings.Contains(stderr.String(), token)) {
			t.Errorf("%s: the credential appears in the output", c.Name)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(e.tmp, "agent-sandbox-tf-*")); len(left) > 0 {
		t.Errorf("working directories made for refused workspaces: %v", left)
	}
	t.Logf("%d malicious workspaces refused by terraform-plan before terraform started", n)
	if n < 25 {
		t.Errorf("only %d malicious workspaces", n)
	}
}

func (e *runnerEnv) clientFor(t *testing.T, scope string) kubernetes.Interface {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, e.creds[scope], 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := toolrun.NewClient(path)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
