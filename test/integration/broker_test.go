//go:build integration

package integration

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/agent-sandbox/agent-sandbox/broker"
	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/test/harness"
)

// brokerHelperEnv makes the test binary act as the agent-sandbox binary: TestBroker runs the real
// cred-agent as a child process this way (real signals, real exit codes, real stdout and stderr) without
// building a second binary.
const brokerHelperEnv = "AGENT_SANDBOX_BROKER_TEST_AS_BINARY"

// TestBrokerCredAgentProcess is not a test: it is the child process of TestBroker's cred-agent cases.
func TestBrokerCredAgentProcess(t *testing.T) {
	if os.Getenv(brokerHelperEnv) != "1" {
		t.Skip("runs only as the cred-agent child process of TestBroker")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := app.Main(ctx, flag.Args(), os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// brokerJWT matches anything shaped like a JWT (a service-account token); none may appear in any output.
var brokerJWT = regexp.MustCompile(`eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*`)

// brokerTranscript collects every line of output and every error the tests produce, to check at the end
// that no token leaked into any of them.
type brokerTranscript struct {
	mu    sync.Mutex
	texts []string
}

func (tr *brokerTranscript) add(what string, texts ...string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, s := range texts {
		tr.texts = append(tr.texts, what+": "+s)
	}
}

func (tr *brokerTranscript) check(t *testing.T, secrets ...string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	total := 0
	for _, s := range tr.texts {
		total += len(s)
		if m := brokerJWT.FindString(s); m != "" {
			t.Errorf("a JWT-shaped string (%.16s...) appears in %.200s", m, s)
		}
		for _, secret := range secrets {
			if secret != "" && strings.Contains(s, secret) {
				t.Errorf("a secret (%.8s...) appears in %.200s", secret, s)
			}
		}
	}
	t.Logf("checked %d outputs (%d bytes) for tokens", len(tr.texts), total)
}

// brokerEnv is the shared state of TestBroker's cases.
type brokerEnv struct {
	*vaultTarget
	kube       kubernetes.Interface
	pol        *policy.Compiled
	policyFile string
	caFile     string // the API server CA, for the cred-agent
	dir        string
	out        *brokerTranscript
}

func TestBroker(t *testing.T) {
	ctx := context.Background()
	target := startVaultTarget(t)
	e := &brokerEnv{vaultTarget: target, kube: target.api.Clientset, dir: t.TempDir(), out: &brokerTranscript{}}
	t.Cleanup(func() { e.out.check(t, e.vault.RootToken) })

	e.caFile = filepath.Join(e.dir, "apiserver-ca.crt")
	if err := os.WriteFile(e.caFile, e.api.CAPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	e.pol, e.policyFile = e.writePolicy(t, "default", nil)
	sandboxNS := e.pol.Spec.Sandbox.Namespace

	// What the Helm chart and the demo set up: the sandbox namespace with one ServiceAccount per tool,
	// and the application namespace, enforcing Pod Security as the local cluster's does (vault configure
	// refuses it otherwise).
	for _, ns := range []*corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: sandboxNS}}, localNamespace(t, "demo-app")} {
		if _, err := e.kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tool := range e.pol.Spec.Tools {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: sandboxNS, Name: tool.ServiceAccount}}
		if _, err := e.kube.CoreV1().ServiceAccounts(sandboxNS).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "demo-app", Name: "web"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}}}
	if _, err := e.kube.CoreV1().Pods("demo-app").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Every case needs a configured Vault, whatever -run selects: configure here, not in a subtest.
	e.testConfigureBadToken(t)
	e.testConfigure(t)
	if t.Failed() {
		t.FailNow()
	}
	t.Run("ConfigureAgainChangesNothing", e.testConfigureIdempotent)
	t.Run("ConfigureConvertsAGeneratedRulesRole", e.testConfigureConverts)
	t.Run("ConfigureClearsWideningFields", e.testConfigureClearsWidening)
	t.Run("MintUseRevoke", e.testMintUseRevoke)
	t.Run("VaultItselfRefuses", e.testVaultRefuses)
	t.Run("ExpiryWithoutRevoke", e.testExpiry)
	t.Run("CredAgent", e.testCredAgent)
	t.Run("CredAgentFailures", e.testCredAgentFailures)
	t.Run("VaultNamespaceHeader", e.testVaultNamespaceHeader)
	t.Run("PruneRemovedTool", e.testPrune)
	t.Run("DisableRefusesLoginsUntilConfigure", e.testDisable)
	t.Run("Latency", e.testLatency)
}

// writePolicy loads the default policy, lets mutate change it, compiles it and writes it to a file.
func (e *brokerEnv) writePolicy(t *testing.T, name string, mutate func(*policy.Policy)) (*policy.Compiled, string) {
	t.Helper()
	data, err := os.ReadFile("../../policy/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Decode(data)
	if err != nil {
		t.Fatalf("default policy: %v", err)
	}
	if mutate != nil {
		mutate(p)
	}
	out, err := yaml.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(e.dir, name+"-policy.yaml")
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := policy.LoadFile(path)
	if err != nil {
		t.Fatalf("policy %s: %v", name, err)
	}
	return c, path
}

// configure runs `agent-sandbox vault configure` in process and returns its exit code and output lines.
func (e *brokerEnv) configure(t *testing.T, policyFile string, extra ...string) (int, []string, string) {
	t.Helper()
	return e.runVault(t, "configure", e.configureArgs(policyFile, extra...), extra)
}

// runVault runs `agent-sandbox vault <sub>` in process with args (extra are the caller's own, for the log)
// and returns its exit code, its output lines and its stderr.
func (e *brokerEnv) runVault(t *testing.T, sub string, args, extra []string) (int, []string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := app.Main(context.Background(), args, strings.NewReader(""), &stdout, &stderr)
	e.out.add("vault "+sub+" stdout", stdout.String())
	e.out.add("vault "+sub+" stderr", stderr.String())
	t.Logf("vault %s %s: exit %d\n%s%s", sub, strings.Join(extra, " "), code, stdout.String(), stderr.String())
	return code, strings.Split(strings.TrimSpace(stdout.String()), "\n"), stderr.String()
}

func (e *brokerEnv) testConfigureBadToken(t *testing.T) {
	bad := filepath.Join(e.dir, "bad-token")
	if err := os.WriteFile(bad, []byte("hvs.NotARealTokenButShapedLikeOne012345"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := app.Main(context.Background(), []string{"vault", "configure", "--policy", e.policyFile, "--vault-addr", e.vault.Addr,
		"--vault-token-file", bad, "--kubeconfig", e.api.KubeconfigPath}, strings.NewReader(""), &stdout, &stderr)
	e.out.add("bad token", stdout.String(), stderr.String())
	want := "error: the Vault token was refused (permission denied); pass an admin or root token with --vault-token-file or VAULT_TOKEN\n"
	if code != 1 || stdout.Len() != 0 || stderr.String() != want {
		t.Errorf("exit %d\nstdout %q\nstderr %q\nwant   %q", code, stdout.String(), stderr.String(), want)
	}
	if strings.Contains(stderr.String(), "NotARealToken") {
		t.Error("the token was printed")
	}
	// Nothing was changed in the cluster.
	if _, err := e.kube.CoreV1().Namespaces().Get(context.Background(), broker.DefaultVaultNamespace, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a refused token still changed the cluster: %v", err)
	}
}

func (e *brokerEnv) testConfigure(t *testing.T) {
	code, lines, _ := e.configure(t, e.policyFile)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{
		"created namespace agent-sandbox-system",
		"created service account agent-sandbox-system/vault",
		"created secret agent-sandbox-system/vault-token",
		"created cluster role agent-sandbox-vault-tokenreview",
		"created cluster role binding agent-sandbox-vault-tokenreview",
		"created cluster role agent-sandbox-scope-pod-reader",
		"created cluster role agent-sandbox-scope-terraform-plan",
		"created role demo-app/agent-sandbox-vault",
		"created role binding demo-app/agent-sandbox-vault",
		"created auth method auth/agent-sandbox-jwt",
		"created secrets engine agent-sandbox-kubernetes",
		"created config auth/agent-sandbox-jwt/config",
		"created config agent-sandbox-kubernetes/config",
		"created policy agent-sandbox-tool-k8s-get-pod-status",
		"created auth role agent-sandbox-k8s-get-pod-status",
		"created auth role agent-sandbox-terraform-apply",
		"created secrets role agent-sandbox-pod-reader",
		"created secrets role agent-sandbox-terraform-plan",
		"unchanged: 0 items",
	} {
		if !slices.Contains(lines, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// Vault holds what the policy says, read back without our code.
	r := e.vaultGet(t, "auth/agent-sandbox-jwt/role/agent-sandbox-k8s-get-pod-status")
	d := r.Data()
	if fmt.Sprint(d["bound_service_account_names"]) != "[tool-k8s-get-pod-status]" || fmt.Sprint(d["bound_service_account_namespaces"]) != "[agent-sandbox]" ||
		d["audience"] != "vault" ||
		fmt.Sprint(d["token_policies"]) != "[agent-sandbox-tool-k8s-get-pod-status]" ||
		fmt.Sprint(d["token_ttl"]) != "600" || d["token_type"] != "service" || d["token_no_default_policy"] != true {
		t.Errorf("auth role: %v", d)
	}
	d = e.vaultGet(t, "agent-sandbox-kubernetes/roles/agent-sandbox-pod-reader").Data()
	if fmt.Sprint(d["allowed_kubernetes_namespaces"]) != "[demo-app]" || d["kubernetes_role_type"] != "ClusterRole" ||
		d["kubernetes_role_name"] != "agent-sandbox-scope-pod-reader" || d["generated_role_rules"] != "" || fmt.Sprint(d["token_default_ttl"]) != "600" {
		t.Errorf("secrets role: %v", d)
	}
}

func (e *brokerEnv) testConfigureIdempotent(t *testing.T) {
	code, lines, _ := e.configure(t, e.policyFile)
	if code != 0 || len(lines) != 1 || !strings.HasPrefix(lines[0], "unchanged: ") {
		t.Errorf("second run: exit %d, %q", code, lines)
	}
	code, lines, _ = e.configure(t, e.policyFile, "--dry-run")
	if code != 0 || len(lines) != 1 || !strings.Contains(lines[0], "dry run") {
		t.Errorf("dry run: exit %d, %q", code, lines)
	}
}

// testConfigureConverts: a secrets role as releases before issue 23 wrote it (a Role generated per call from
// rules) is converted in place to bind the scope's ClusterRole, which the engine accepts only because
// configure writes the other kinds empty.
func (e *brokerEnv) testConfigureConverts(t *testing.T) {
	path := "agent-sandbox-kubernetes/roles/agent-sandbox-pod-reader"
	old := map[string]any{"kubernetes_role_type": "Role", "kubernetes_role_name": "",
		"generated_role_rules": `{"rules":[{"apiGroups":[""],"resources":["pods"],"verbs":["get","list"]}]}`}
	if r, err := e.vault.Request(context.Background(), "POST", path, e.vault.RootToken, old); err != nil || r.Status/100 != 2 {
		t.Fatalf("write the old role: %v %+v", err, r)
	}
	code, lines, _ := e.configure(t, e.policyFile)
	if code != 0 || len(lines) != 2 || lines[0] != "updated secrets role agent-sandbox-pod-reader" {
		t.Errorf("configure over the old role: exit %d %q", code, lines)
	}
	d := e.vaultGet(t, path).Data()
	if d["kubernetes_role_name"] != "agent-sandbox-scope-pod-reader" || d["generated_role_rules"] != "" || d["kubernetes_role_type"] != "ClusterRole" {
		t.Errorf("converted role: %v", d)
	}
}

// testConfigureClearsWidening: a namespace selector (ORed with the bound namespaces), a token period and an
// explicit max TTL put on the roles by hand survived configure, which compared only the fields it writes
// and reported "unchanged" (found in review, 2026-12-06); Vault keeps a field a write leaves out. Now it
// writes them empty, so they are seen and cleared.
func (e *brokerEnv) testConfigureClearsWidening(t *testing.T) {
	auth := "auth/agent-sandbox-jwt/role/agent-sandbox-terraform-apply"
	secrets := "agent-sandbox-kubernetes/roles/agent-sandbox-pod-reader"
	for path, fields := range map[string]map[string]any{
		auth:    {"bound_service_account_namespace_selector": `{"matchLabels":{}}`, "token_period": 86400, "token_explicit_max_ttl": 86400},
		secrets: {"allowed_kubernetes_namespace_selector": `{"matchLabels":{}}`},
	} {
		// A write changes the fields it names and keeps the others.
		if r, err := e.vault.Request(context.Background(), "POST", path, e.vault.RootToken, fields); err != nil || r.Status/100 != 2 {
			t.Fatalf("widen %s: %v %+v", path, err, r)
		}
		for k, v := range fields {
			if got := e.vaultGet(t, path).Data()[k]; fmt.Sprint(got) != fmt.Sprint(v) {
				t.Fatalf("Vault did not keep %s = %v on %s (reads %v): the case proves nothing", k, v, path, got)
			}
		}
	}
	code, lines, _ := e.configure(t, e.policyFile)
	if code != 0 || !slices.Contains(lines, "updated auth role agent-sandbox-terraform-apply") || !slices.Contains(lines, "updated secrets role agent-sandbox-pod-reader") {
		t.Errorf("configure over the widened roles: exit %d %q", code, lines)
	}
	d := e.vaultGet(t, auth).Data()
	if d["bound_service_account_namespace_selector"] != "" || fmt.Sprint(d["token_period"]) != "0" || fmt.Sprint(d["token_explicit_max_ttl"]) != "0" {
		t.Errorf("auth role after configure: %v", d)
	}
	if d := e.vaultGet(t, secrets).Data(); d["allowed_kubernetes_namespace_selector"] != "" {
		t.Errorf("secrets role after configure: %v", d)
	}
	if code, lines, _ := e.configure(t, e.policyFile); code != 0 || len(lines) != 1 || !strings.HasPrefix(lines[0], "unchanged: ") {
		t.Errorf("configure again: exit %d %q", code, lines)
	}
}

func (e *brokerEnv) vaultGet(t *testing.T, path string) *harness.Response {
	t.Helper()
	r, err := e.vault.Request(context.Background(), "GET", path, e.vault.RootToken, nil)
	if err != nil || r.Status != 200 {
		t.Fatalf("GET %s: %v %+v", path, err, r)
	}
	return r
}

// saToken is what the kubelet projects into the sidecar: a token for the tool's ServiceAccount, bound to
// a sandbox Pod of the tool (this test environment has no admission webhook and no kubelet, so the Pod is
// created directly and never runs).
func (e *brokerEnv) saToken(t *testing.T, sa, audience string) string {
	t.Helper()
	return e.boundToken(t, sa, audience, e.sandboxPod(t, sa))
}

// sandboxPod creates a Pod named like a sandbox Pod of the tool whose ServiceAccount is sa.
func (e *brokerEnv) sandboxPod(t *testing.T, sa string) *corev1.Pod {
	t.Helper()
	tool := ""
	for _, tl := range e.pol.Spec.Tools {
		if tl.ServiceAccount == sa {
			tool = tl.Name
		}
	}
	ns := e.pol.Spec.Sandbox.Namespace
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: sandbox.JobNamePrefix(tool) + "test-"},
		Spec: corev1.PodSpec{ServiceAccountName: sa, AutomountServiceAccountToken: new(false), Containers: []corev1.Container{{Name: "tool", Image: "x"}}}}
	p, err := e.kube.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("sandbox Pod for %s: %v", sa, err)
	}
	return p
}

// boundToken requests a token for sa bound to pod (nil: bound to nothing, as `kubectl create token` is).
func (e *brokerEnv) boundToken(t *testing.T, sa, audience string, pod *corev1.Pod) string {
	t.Helper()
	secs := int64(600)
	spec := authenticationv1.TokenRequestSpec{Audiences: []string{audience}, ExpirationSeconds: &secs}
	if pod != nil {
		spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	tr, err := e.kube.CoreV1().ServiceAccounts(e.pol.Spec.Sandbox.Namespace).CreateToken(context.Background(), sa,
		&authenticationv1.TokenRequest{Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s: %v", sa, err)
	}
	return tr.Status.Token
}

// mint logs in as the tool and mints its scope's credential for ns, like the agent does.
func (e *brokerEnv) mint(t *testing.T, toolName, ns string) (*broker.Client, *broker.Credential) {
	t.Helper()
	tool, err := e.pol.Tool(toolName)
	if err != nil {
		t.Fatal(err)
	}
	ca := e.pol.Spec.Sandbox.CredentialAgent
	c, err := broker.NewClient(e.vault.Addr, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Login(context.Background(), ca.VaultAuthMount, tool.VaultAuthRole(), []byte(e.saToken(t, tool.ServiceAccount, ca.VaultAudience))); err != nil {
		e.out.add("login error", err.Error())
		t.Fatalf("login as %s: %v", tool.VaultAuthRole(), err)
	}
	cred, err := c.Mint(context.Background(), ca.VaultSecretsMount, e.pol.Scope(tool.Scope).VaultSecretsRole(), ns)
	if err != nil {
		e.out.add("mint error", err.Error())
		t.Fatalf("mint: %v", err)
	}
	e.out.add("credential", cred.String(), fmt.Sprintf("%+v %#v", cred, cred))
	return c, cred
}

// as is a client that authenticates with the minted token.
func (e *brokerEnv) as(t *testing.T, token string) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: e.api.URL, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: e.api.CAPEM}})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// generatedGone reports whether the ServiceAccount, Role and RoleBinding Vault generated are all deleted.
func (e *brokerEnv) generatedGone(ctx context.Context, cred *broker.Credential) bool {
	_, saErr := e.kube.CoreV1().ServiceAccounts(cred.Namespace).Get(ctx, cred.ServiceAccount, metav1.GetOptions{})
	_, rErr := e.kube.RbacV1().Roles(cred.Namespace).Get(ctx, cred.ServiceAccount, metav1.GetOptions{})
	_, rbErr := e.kube.RbacV1().RoleBindings(cred.Namespace).Get(ctx, cred.ServiceAccount, metav1.GetOptions{})
	return apierrors.IsNotFound(saErr) && apierrors.IsNotFound(rErr) && apierrors.IsNotFound(rbErr)
}

// waitDead polls until the credential no longer lists pods and Vault's objects are gone.
func (e *brokerEnv) waitDead(t *testing.T, cred *broker.Credential, timeout time.Duration) time.Duration {
	t.Helper()
	ctx := context.Background()
	start := time.Now()
	cs := e.as(t, cred.Token)
	for {
		_, err := cs.CoreV1().Pods(cred.Namespace).List(ctx, metav1.ListOptions{})
		dead := apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err)
		if dead && e.generatedGone(ctx, cred) {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("after %s the credential still works (list pods: %v) or its objects remain (gone: %v)", timeout, err, e.generatedGone(ctx, cred))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (e *brokerEnv) testMintUseRevoke(t *testing.T) {
	ctx := context.Background()
	c, cred := e.mint(t, "k8s_get_pod_status", "demo-app")
	if !strings.HasPrefix(cred.ServiceAccount, broker.GeneratedNamePrefix+"pod-reader-") || cred.Namespace != "demo-app" {
		t.Errorf("generated service account %s/%s", cred.Namespace, cred.ServiceAccount)
	}
	if cred.TTL != 10*time.Minute {
		t.Errorf("lease TTL %s, want 10m", cred.TTL)
	}
	sa, err := e.kube.CoreV1().ServiceAccounts("demo-app").Get(ctx, cred.ServiceAccount, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("generated ServiceAccount %s labels %v", sa.Name, sa.Labels)
	if sa.Labels[broker.LabelScope] != "pod-reader" || sa.Labels["app.kubernetes.io/managed-by"] == "" {
		t.Errorf("labels %v", sa.Labels)
	}
	// Vault made a ServiceAccount and a RoleBinding of the scope's ClusterRole in the target namespace, and
	// no Role: the scope's rules are written once, by configure.
	if _, err := e.kube.RbacV1().Roles("demo-app").Get(ctx, cred.ServiceAccount, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a Role per credential: %v", err)
	}
	rb, err := e.kube.RbacV1().RoleBindings("demo-app").Get(ctx, cred.ServiceAccount, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rb.RoleRef.Kind != "ClusterRole" || rb.RoleRef.Name != "agent-sandbox-scope-pod-reader" || len(rb.Subjects) != 1 || rb.Subjects[0].Name != cred.ServiceAccount {
		t.Errorf("generated role binding %+v", rb)
	}
	role, err := e.kube.RbacV1().ClusterRoles().Get(ctx, rb.RoleRef.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(role.Rules) != 1 || fmt.Sprint(role.Rules[0].Resources, role.Rules[0].Verbs) != "[pods] [get list]" {
		t.Errorf("scope role rules %+v", role.Rules)
	}

	cs := e.as(t, cred.Token)
	pods, err := cs.CoreV1().Pods("demo-app").List(ctx, metav1.ListOptions{})
	if err != nil || len(pods.Items) != 1 {
		t.Errorf("list pods in demo-app: %v", err)
	}
	if _, err := cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("list pods in kube-system: %v, want forbidden", err)
	}
	if _, err := cs.CoreV1().Secrets("demo-app").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("list secrets in demo-app: %v, want forbidden", err)
	}
	if _, err := cs.CoreV1().Pods("demo-app").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "x", Image: "x"}}}}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("create pod in demo-app: %v, want forbidden", err)
	}

	start := time.Now()
	if err := c.RevokeSelf(ctx); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	took := e.waitDead(t, cred, 15*time.Second)
	t.Logf("revoke-self returned in %s; credential dead and SA/Role/RoleBinding gone %s after it", time.Since(start)-took, took)
}

func (e *brokerEnv) testVaultRefuses(t *testing.T) {
	ctx := context.Background()
	login := func(role, jwt string) *harness.Response {
		r, err := e.vault.Request(ctx, "PUT", "auth/agent-sandbox-jwt/login", "", map[string]any{"role": role, "jwt": jwt})
		if err != nil {
			t.Fatal(err)
		}
		e.out.add("vault login "+role, strings.Join(r.Errors, "; "))
		return r
	}
	podToken := e.saToken(t, "tool-k8s-get-pod-status", "vault")
	r := login("agent-sandbox-k8s-get-pod-status", podToken)
	if r.Status != 200 {
		t.Fatalf("login: %+v", r)
	}
	vaultToken := r.Body["auth"].(map[string]any)["client_token"].(string)
	defer e.vault.Request(ctx, "PUT", "auth/token/revoke-self", vaultToken, nil) //nolint:errcheck

	// Invariant 4 at Vault's own level: bypass agent-sandbox entirely and ask for kube-system, or for more
	// than a namespace. The tool's ACL policy allows only its own namespaces and no other parameter: a
	// cluster-wide binding of the scope's ClusterRole, another TTL or audience are refused before the role
	// is even read.
	creds := func(token string, body map[string]any) *harness.Response {
		t.Helper()
		r, err := e.vault.Request(ctx, "PUT", "agent-sandbox-kubernetes/creds/agent-sandbox-pod-reader", token, body)
		if err != nil {
			t.Fatal(err)
		}
		e.out.add(fmt.Sprintf("creds %v", body), strings.Join(r.Errors, "; "))
		return r
	}
	for _, body := range []map[string]any{
		{"kubernetes_namespace": "kube-system"},
		{"kubernetes_namespace": "demo-app", "cluster_role_binding": true},
		{"kubernetes_namespace": "demo-app", "ttl": "24h"},
		{"kubernetes_namespace": "demo-app", "audiences": "https://kubernetes.default.svc"},
	} {
		if r := creds(vaultToken, body); r.Status != 403 {
			t.Errorf("creds %v with the tool's token: HTTP %d %q, want 403 from its policy", body, r.Status, r.Errors)
		} else {
			t.Logf("creds %v: refused, HTTP %d %q", body, r.Status, r.Errors)
		}
	}
	// The role refuses kube-system too, to a token whose policy would allow it (root).
	if r := creds(e.vault.RootToken, map[string]any{"kubernetes_namespace": "kube-system"}); r.Status != 400 || len(r.Errors) == 0 ||
		!strings.Contains(r.Errors[0], "allowed_kubernetes_namespaces") {
		t.Errorf("creds for kube-system with the root token: HTTP %d %q, want 400 from the role's allowed_kubernetes_namespaces", r.Status, r.Errors)
	}
	// The tool's token may mint only its own scope.
	r, _ = e.vault.Request(ctx, "PUT", "agent-sandbox-kubernetes/creds/agent-sandbox-terraform-apply", vaultToken, map[string]any{"kubernetes_namespace": "demo-app"})
	if r.Status != 403 {
		t.Errorf("creds of another scope: HTTP %d %q, want 403", r.Status, r.Errors)
	}
	// ... and cannot read roles or configure anything.
	r, _ = e.vault.Request(ctx, "GET", "agent-sandbox-kubernetes/roles/agent-sandbox-pod-reader", vaultToken, nil)
	if r.Status != 403 {
		t.Errorf("read role with the tool's token: HTTP %d, want 403", r.Status)
	}
	// A tool's ServiceAccount cannot log in as another tool, nor with a token for another audience. (A
	// token bound to nothing, what `kubectl create token tool-terraform-apply --audience vault` would give
	// (issue 9's fourth finding), is refused by admission, not by Vault: the Kubernetes auth method cannot
	// require a Pod binding. What it checks instead, that the bound Pod still exists, is
	// TestVaultLoginNeedsALivePod.)
	refused := func(what string, r *harness.Response) {
		t.Helper()
		if r.Status != 400 && r.Status != 403 {
			t.Errorf("%s: HTTP %d %q, want a refusal", what, r.Status, r.Errors)
		} else {
			t.Logf("%s: refused, HTTP %d %q", what, r.Status, r.Errors)
		}
	}
	refused("login as another tool", login("agent-sandbox-terraform-apply", podToken))
	refused("login with the wrong audience", login("agent-sandbox-k8s-get-pod-status", e.saToken(t, "tool-k8s-get-pod-status", "https://kubernetes.default.svc")))
	// (A token of the apply tool bound to another tool's Pod cannot even be made: the API server refuses to
	// bind a ServiceAccount's token to a Pod that runs as another ServiceAccount.)
	// Through our code the refusal is ErrPermissionDenied, and says why.
	c, err := broker.NewClient(e.vault.Addr, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Login(ctx, "agent-sandbox-jwt", "agent-sandbox-k8s-get-pod-status", []byte(e.saToken(t, "tool-k8s-get-pod-status", "vault"))); err != nil {
		t.Fatal(err)
	}
	_, err = c.Mint(ctx, "agent-sandbox-kubernetes", "agent-sandbox-pod-reader", "kube-system")
	e.out.add("mint kube-system", fmt.Sprint(err))
	if !errors.Is(err, broker.ErrPermissionDenied) {
		t.Errorf("Mint(kube-system) = %v, want ErrPermissionDenied", err)
	}
	if err := c.RevokeSelf(ctx); err != nil {
		t.Error(err)
	}
}

func (e *brokerEnv) testExpiry(t *testing.T) {
	ctx := context.Background()
	role := "auth/agent-sandbox-jwt/role/agent-sandbox-k8s-get-pod-status"
	r, err := e.vault.Request(ctx, "POST", role, e.vault.RootToken, map[string]any{"token_ttl": 5, "token_max_ttl": 5})
	if err != nil || r.Status/100 != 2 {
		t.Fatalf("shorten the token TTL: %v %+v", err, r)
	}
	_, cred := e.mint(t, "k8s_get_pod_status", "demo-app")
	t.Logf("with a 5 s Vault token the lease was granted for %s", cred.TTL)
	if _, err := e.as(t, cred.Token).CoreV1().Pods("demo-app").List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("fresh credential: %v", err)
	}
	took := e.waitDead(t, cred, 60*time.Second)
	t.Logf("without any revoke call, the credential died and its objects were deleted %s after minting (token TTL 5 s)", took)

	// configure repairs the drift.
	code, lines, _ := e.configure(t, e.policyFile)
	if code != 0 || !slices.Contains(lines, "updated auth role agent-sandbox-k8s-get-pod-status") {
		t.Errorf("configure after drift: exit %d %q", code, lines)
	}
}

// agentProcess is one cred-agent child process.
type agentProcess struct {
	cmd            *exec.Cmd
	stdout, stderr *harness.SyncBuffer
	// done is closed when the process has exited.
	done chan struct{}
}

func (p *agentProcess) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (e *brokerEnv) startAgent(t *testing.T, args ...string) *agentProcess {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, append([]string{"-test.run=^TestBrokerCredAgentProcess$", "--", "cred-agent"}, args...)...)
	cmd.Env = append(os.Environ(), brokerHelperEnv+"=1")
	p := &agentProcess{cmd: cmd, stdout: &harness.SyncBuffer{}, stderr: &harness.SyncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.exited() {
			_ = cmd.Process.Kill()
			<-p.done
		}
		e.out.add("cred-agent stdout", p.stdout.String())
		e.out.add("cred-agent stderr", p.stderr.String())
	})
	return p
}

// wait returns the exit code, failing the test if the process runs longer than timeout.
func (p *agentProcess) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Fatalf("cred-agent still running after %s\nstdout: %s\nstderr: %s", timeout, p.stdout, p.stderr)
		return -1
	}
}

// agentArgs are the flags the webhook renders for the tool, with files in dir.
func (e *brokerEnv) agentArgs(t *testing.T, dir, toolName, tokenFile string) []string {
	tool, err := e.pol.Tool(toolName)
	if err != nil {
		t.Fatal(err)
	}
	ca := e.pol.Spec.Sandbox.CredentialAgent
	return []string{
		"--vault-addr=" + e.vault.Addr,
		"--auth-mount=" + ca.VaultAuthMount, "--auth-role=" + tool.VaultAuthRole(),
		"--secrets-mount=" + ca.VaultSecretsMount, "--secrets-role=" + e.pol.Scope(tool.Scope).VaultSecretsRole(),
		"--namespace=demo-app", "--scope=" + tool.Scope,
		"--token-file=" + tokenFile, "--api-server=" + e.api.URL, "--api-ca-file=" + e.caFile,
		"--out=" + filepath.Join(dir, "kubeconfig"),
	}
}

func (e *brokerEnv) writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func (e *brokerEnv) testCredAgent(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tokenFile := e.writeFile(t, "token", e.saToken(t, "tool-k8s-get-pod-status", "vault"))
	kc := filepath.Join(dir, "kubeconfig")
	p := e.startAgent(t, e.agentArgs(t, dir, "k8s_get_pod_status", tokenFile)...)

	deadline := time.Now().Add(30 * time.Second)
	for broker.KubeconfigReady(kc) != nil {
		if time.Now().After(deadline) || p.exited() {
			t.Fatalf("no kubeconfig after 30s\nstdout: %s\nstderr: %s", p.stdout, p.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The sidecar's postStart hook (cred-agent ready) agrees.
	var so, se bytes.Buffer
	if code := app.Main(ctx, []string{"cred-agent", "ready", "--file", kc}, strings.NewReader(""), &so, &se); code != 0 {
		t.Errorf("cred-agent ready: exit %d %s", code, se.String())
	}
	fi, err := os.Stat(kc)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o400 {
		t.Errorf("kubeconfig mode %v, want 0400", fi.Mode().Perm())
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods("demo-app").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("list pods with the written kubeconfig: %v", err)
	}
	if _, err := cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("kube-system with the written kubeconfig: %v", err)
	}
	// Wait for the event line (it follows the file).
	deadline = time.Now().Add(5 * time.Second)
	for !strings.Contains(p.stdout.String(), "\n") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	issued := brokerEvents(t, p.stdout.String())
	if len(issued) != 1 || issued[0]["event"] != "credential.issued" || issued[0]["scope"] != "pod-reader" || issued[0]["namespace"] != "demo-app" ||
		issued[0]["ttl_seconds"] != float64(600) || issued[0]["lease_id"] == "" || issued[0]["service_account"] == "" || issued[0]["time"] == "" {
		t.Errorf("issued event: %s", p.stdout)
	}
	cred := &broker.Credential{Namespace: "demo-app", ServiceAccount: fmt.Sprint(issued[0]["service_account"]), Token: rc.BearerToken}

	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 15*time.Second); code != 0 {
		t.Errorf("exit %d after SIGTERM; stderr %s", code, p.stderr)
	}
	t.Logf("cred-agent exited %s after SIGTERM", time.Since(start).Round(time.Millisecond))
	if _, err := os.Stat(kc); !os.IsNotExist(err) {
		t.Errorf("kubeconfig still there: %v", err)
	}
	evs := brokerEvents(t, p.stdout.String())
	if len(evs) != 2 || evs[1]["event"] != "credential.revoked" || evs[1]["lease_id"] != issued[0]["lease_id"] {
		t.Errorf("events after SIGTERM: %s", p.stdout)
	}
	if p.stderr.Len() != 0 {
		t.Errorf("stderr: %s", p.stderr)
	}
	e.waitDead(t, cred, 15*time.Second)
}

func brokerEvents(t *testing.T, stdout string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := yaml.Unmarshal([]byte(line), &m); err != nil || !strings.HasPrefix(line, "{") {
			t.Fatalf("stdout line is not a JSON event: %q", line)
		}
		out = append(out, m)
	}
	return out
}

func (e *brokerEnv) testCredAgentFailures(t *testing.T) {
	goodToken := e.writeFile(t, "token", e.saToken(t, "tool-k8s-get-pod-status", "vault"))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	l.Close()

	for _, tc := range []struct {
		name   string
		tweak  func(args []string) []string
		stderr string
	}{
		{"VaultUnreachable", func(a []string) []string {
			return append(a, "--vault-addr="+closed, "--login-timeout=2s")
		}, "cred-agent: vault login as role agent-sandbox-k8s-get-pod-status failed: gave up after 2s: vault at " + closed + " is unreachable: dial tcp"},
		{"WrongRole", func(a []string) []string {
			return append(a, "--auth-role=agent-sandbox-terraform-apply")
		}, "cred-agent: vault login as role agent-sandbox-terraform-apply failed: "},
		{"UnknownRole", func(a []string) []string {
			return append(a, "--auth-role=agent-sandbox-nope")
		}, "cred-agent: vault login as role agent-sandbox-nope failed: invalid role name \"agent-sandbox-nope\""},
		{"WrongAudience", func(a []string) []string {
			return append(a, "--token-file="+e.writeFile(t, "aud", e.saToken(t, "tool-k8s-get-pod-status", "https://kubernetes.default.svc")))
		}, "cred-agent: vault login as role agent-sandbox-k8s-get-pod-status failed: "},
		{"GarbageToken", func(a []string) []string {
			return append(a, "--token-file="+e.writeFile(t, "garbage", "not-a-token"))
		}, "cred-agent: vault login as role agent-sandbox-k8s-get-pod-status failed: "},
		{"NamespaceNotAllowed", func(a []string) []string {
			return append(a, "--namespace=kube-system")
		}, "cred-agent: vault credential agent-sandbox-kubernetes/creds/agent-sandbox-pod-reader for namespace kube-system failed: permission denied (the tool's Vault policy lets it mint only in the namespaces"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			start := time.Now()
			p := e.startAgent(t, tc.tweak(e.agentArgs(t, dir, "k8s_get_pod_status", goodToken))...)
			code := p.wait(t, 30*time.Second)
			stderr := p.stderr.String()
			t.Logf("exit %d after %s: %s", code, time.Since(start).Round(time.Millisecond), strings.TrimSpace(stderr))
			if code != 1 {
				t.Errorf("exit %d, want 1", code)
			}
			if !strings.HasPrefix(stderr, tc.stderr) || strings.Count(stderr, "\n") != 1 {
				t.Errorf("stderr %q, want one line starting %q", stderr, tc.stderr)
			}
			if p.stdout.Len() != 0 {
				t.Errorf("stdout %q", p.stdout)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("files left in the credential directory: %v", entries)
			}
		})
	}
}

func (e *brokerEnv) testPrune(t *testing.T) {
	_, pruned := e.writePolicy(t, "pruned", func(p *policy.Policy) {
		p.Spec.Tools = slices.DeleteFunc(p.Spec.Tools, func(t policy.Tool) bool { return t.Name == "terraform_apply" })
	})
	code, lines, _ := e.configure(t, pruned, "--dry-run")
	if code != 0 || !slices.Contains(lines, "would delete auth role agent-sandbox-terraform-apply (no longer in the policy)") {
		t.Errorf("dry run: exit %d %q", code, lines)
	}
	if r, _ := e.vault.Request(context.Background(), "GET", "auth/agent-sandbox-jwt/role/agent-sandbox-terraform-apply", e.vault.RootToken, nil); r.Status != 200 {
		t.Errorf("the dry run deleted the role: HTTP %d", r.Status)
	}

	code, lines, _ = e.configure(t, pruned)
	for _, want := range []string{
		"deleted auth role agent-sandbox-terraform-apply (no longer in the policy)",
		"deleted policy agent-sandbox-tool-terraform-apply (no longer in the policy)",
		"deleted secrets role agent-sandbox-terraform-apply (no longer in the policy)",
		"deleted cluster role agent-sandbox-scope-terraform-apply (no longer in the policy)",
		"updated role demo-app/agent-sandbox-vault",
	} {
		if !slices.Contains(lines, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if code != 0 {
		t.Errorf("exit %d", code)
	}
	for _, path := range []string{"auth/agent-sandbox-jwt/role/agent-sandbox-terraform-apply", "agent-sandbox-kubernetes/roles/agent-sandbox-terraform-apply", "sys/policies/acl/agent-sandbox-tool-terraform-apply"} {
		if r, _ := e.vault.Request(context.Background(), "GET", path, e.vault.RootToken, nil); r.Status != 404 {
			t.Errorf("%s: HTTP %d after pruning, want 404", path, r.Status)
		}
	}
	// The remaining tools are untouched and still work.
	r, _ := e.vault.Request(context.Background(), "GET", "auth/agent-sandbox-jwt/role/agent-sandbox-k8s-get-pod-status", e.vault.RootToken, nil)
	if r.Status != 200 {
		t.Errorf("k8s_get_pod_status role: HTTP %d", r.Status)
	}
	// Back to the full policy.
	if code, lines, _ := e.configure(t, e.policyFile); code != 0 || !slices.Contains(lines, "created auth role agent-sandbox-terraform-apply") ||
		!slices.Contains(lines, "created cluster role agent-sandbox-scope-terraform-apply") {
		t.Errorf("restore: exit %d %q", code, lines)
	}
}

// testLatency measures minting (login + creds) and revocation, p50/p95, first back to back, then paced.
//
// Back to back, the Kubernetes secrets engine's own client-go rate limiter (QPS 5, burst 10: it builds its
// rest.Config without setting them) dominates: a mint makes 4 API calls and a revocation 3, so after the
// burst each cycle waits for the bucket. Paced at one cycle per 1.5 s, the figures are Vault's and the API
// server's own cost.
func (e *brokerEnv) testLatency(t *testing.T) {
	e.measure(t, "back to back", 50, 0)
	time.Sleep(2 * time.Second) // refill the engine's rate limiter
	e.measure(t, "paced, one per 1.5 s", 10, 1500*time.Millisecond)
}

func (e *brokerEnv) measure(t *testing.T, name string, n int, pace time.Duration) {
	ctx := context.Background()
	var logins, creds, mints, revokes, cleanups []time.Duration
	for range n {
		next := time.Now().Add(pace)
		jwt := e.saToken(t, "tool-k8s-get-pod-status", "vault")
		c, err := broker.NewClient(e.vault.Addr, "", "")
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		if _, err := c.Login(ctx, "agent-sandbox-jwt", "agent-sandbox-k8s-get-pod-status", []byte(jwt)); err != nil {
			t.Fatal(err)
		}
		tl := time.Now()
		cred, err := c.Mint(ctx, "agent-sandbox-kubernetes", "agent-sandbox-pod-reader", "demo-app")
		if err != nil {
			t.Fatal(err)
		}
		t1 := time.Now()
		if err := c.RevokeSelf(ctx); err != nil {
			t.Fatal(err)
		}
		t2 := time.Now()
		for !e.generatedGone(ctx, cred) {
			if time.Since(t2) > 15*time.Second {
				t.Fatalf("objects of %s not deleted after 15s", cred.ServiceAccount)
			}
			time.Sleep(5 * time.Millisecond)
		}
		logins, creds = append(logins, tl.Sub(t0)), append(creds, t1.Sub(tl))
		mints, revokes, cleanups = append(mints, t1.Sub(t0)), append(revokes, t2.Sub(t1)), append(cleanups, time.Since(t2))
		time.Sleep(time.Until(next))
	}
	t.Logf("%d mint+revoke cycles, %s, against the local Vault dev server and kube-apiserver:", n, name)
	for _, m := range []struct {
		name string
		d    []time.Duration
	}{{"mint (login + creds)", mints}, {"  login", logins}, {"  creds", creds}, {"revoke (revoke-self)", revokes}, {"revoke -> SA/Role/RoleBinding gone", cleanups}} {
		t.Logf("  %-36s p50 %8s  p95 %8s  min %8s", m.name, brokerPercentile(m.d, 50).Round(100*time.Microsecond),
			brokerPercentile(m.d, 95).Round(100*time.Microsecond), slices.Min(m.d).Round(100*time.Microsecond))
	}
}

func brokerPercentile(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(i-1, 0)]
}

// testVaultNamespaceHeader: with VAULT_NAMESPACE set, `vault configure` makes every request in that
// namespace, and so does the real cred-agent process with --vault-namespace (the flag the webhook renders
// from the policy's credentialAgent.vaultNamespace). The dev Vault here is OSS, which has no namespaces
// and ignores the header, so a recording proxy in front of it checks that the header is sent while the
// configuration and the credential are the real ones. Without a namespace the configure above and every
// other case send none (checked last, through the same proxy).
func (e *brokerEnv) testVaultNamespaceHeader(t *testing.T) {
	const ns = "admin/team-a"
	var mu sync.Mutex
	var seen []string // one per request: the header's value, or "<none>"
	target, err := url.Parse(e.vault.Addr)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := "<none>"
		if h := r.Header.Values("X-Vault-Namespace"); len(h) > 0 {
			v = strings.Join(h, ",")
		}
		mu.Lock()
		seen = append(seen, v)
		mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	defer srv.Close()
	check := func(what, want string) {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		if len(seen) == 0 {
			t.Errorf("%s: no request reached Vault", what)
		}
		for i, v := range seen {
			if v != want {
				t.Errorf("%s: request %d carries X-Vault-Namespace %s, want %s", what, i, v, want)
			}
		}
		t.Logf("%s: %d Vault requests, each with X-Vault-Namespace %s", what, len(seen), want)
		seen = nil
	}

	t.Setenv("VAULT_NAMESPACE", ns)
	args := []string{"vault", "configure", "--policy", e.policyFile, "--vault-addr", srv.URL,
		"--vault-token-file", e.tokenFile, "--kubeconfig", e.api.KubeconfigPath}
	var stdout, stderr bytes.Buffer
	code := app.Main(context.Background(), args, strings.NewReader(""), &stdout, &stderr)
	e.out.add("vault configure in a namespace", stdout.String(), stderr.String())
	if code != 0 || !strings.HasPrefix(stdout.String(), "unchanged: ") {
		t.Errorf("configure with VAULT_NAMESPACE: exit %d\nstdout %s\nstderr %s", code, stdout.String(), stderr.String())
	}
	if !strings.Contains(stderr.String(), "note: configuring Vault namespace "+ns+" (from VAULT_NAMESPACE)") {
		t.Errorf("no note that the policy does not name the namespace: %q", stderr.String())
	}
	check("vault configure", ns)

	dir := t.TempDir()
	tokenFile := e.writeFile(t, "token", e.saToken(t, "tool-k8s-get-pod-status", "vault"))
	agentArgs := e.agentArgs(t, dir, "k8s_get_pod_status", tokenFile)
	agentArgs[0] = "--vault-addr=" + srv.URL
	p := e.startAgent(t, append(agentArgs, "--vault-namespace="+ns)...)
	deadline := time.Now().Add(30 * time.Second)
	for broker.KubeconfigReady(filepath.Join(dir, "kubeconfig")) != nil {
		if time.Now().After(deadline) || p.exited() {
			t.Fatalf("no kubeconfig after 30s\nstdout: %s\nstderr: %s", p.stdout, p.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 15*time.Second); code != 0 {
		t.Errorf("cred-agent exit %d; stderr %s", code, p.stderr)
	}
	check("cred-agent --vault-namespace", ns)

	// OSS configure without a namespace still works and sends none.
	t.Setenv("VAULT_NAMESPACE", "")
	stdout.Reset()
	stderr.Reset()
	code = app.Main(context.Background(), args, strings.NewReader(""), &stdout, &stderr)
	e.out.add("vault configure without a namespace", stdout.String(), stderr.String())
	if code != 0 || !strings.HasPrefix(stdout.String(), "unchanged: ") || stderr.Len() != 0 {
		t.Errorf("configure without VAULT_NAMESPACE: exit %d\nstdout %s\nstderr %s", code, stdout.String(), stderr.String())
	}
	check("vault configure without a namespace", "<none>")
}

// disable runs `agent-sandbox vault disable` in process (no kubeconfig: it needs none) and returns its exit
// code, its output lines and its stderr.
func (e *brokerEnv) disable(t *testing.T, extra ...string) (int, []string, string) {
	t.Helper()
	args := append([]string{"vault", "disable", "--policy", e.policyFile, "--vault-addr", e.vault.Addr, "--vault-token-file", e.tokenFile}, extra...)
	return e.runVault(t, "disable", args, extra)
}

// testDisable is the hole `helm uninstall` left open (found in review): the uninstall removes the webhook
// and the tools' ServiceAccounts, the sandbox namespace stays, and Vault's login roles stay. Anybody with
// the edit role there recreates tool-<name>, runs a Pod as it and projects a token for the Vault audience;
// with no webhook nothing refuses that (this environment has none either), and Vault logs them in as the
// tool. `vault disable`, run before the uninstall, makes Vault refuse that login; `vault configure` after
// the next install accepts it again.
func (e *brokerEnv) testDisable(t *testing.T) {
	ctx := context.Background()
	tool, err := e.pol.Tool("k8s_get_pod_status")
	if err != nil {
		t.Fatal(err)
	}
	ca := e.pol.Spec.Sandbox.CredentialAgent
	sandboxNS := e.pol.Spec.Sandbox.Namespace
	// The attacker's ServiceAccount: the chart's was deleted by the uninstall, this one is new (a new UID).
	if err := e.kube.CoreV1().ServiceAccounts(sandboxNS).Delete(ctx, tool.ServiceAccount, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: sandboxNS, Name: tool.ServiceAccount}}
	if _, err := e.kube.CoreV1().ServiceAccounts(sandboxNS).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A valid projected token for the recreated ServiceAccount, bound to a live Pod that runs as it.
	jwt := e.saToken(t, tool.ServiceAccount, ca.VaultAudience)
	login := func() *harness.Response {
		t.Helper()
		r, err := e.vault.Request(ctx, "PUT", "auth/"+ca.VaultAuthMount+"/login", "", map[string]any{"role": tool.VaultAuthRole(), "jwt": jwt})
		if err != nil {
			t.Fatal(err)
		}
		e.out.add("vault login "+tool.VaultAuthRole(), strings.Join(r.Errors, "; "))
		return r
	}
	creds := func(token string) *harness.Response {
		t.Helper()
		r, err := e.vault.Request(ctx, "PUT", ca.VaultSecretsMount+"/creds/"+e.pol.Scope(tool.Scope).VaultSecretsRole(), token, map[string]any{"kubernetes_namespace": "demo-app"})
		if err != nil {
			t.Fatal(err)
		}
		e.out.add("creds", strings.Join(r.Errors, "; "))
		if r.Status == 200 {
			// Revoke what was minted at once: this case is about logins.
			lease, _ := r.Body["lease_id"].(string)
			e.vault.Request(ctx, "PUT", "sys/leases/revoke", e.vault.RootToken, map[string]any{"lease_id": lease}) //nolint:errcheck
		}
		return r
	}

	// The gap: configured Vault logs the recreated ServiceAccount in as the tool.
	r := login()
	if r.Status != 200 {
		t.Fatalf("login after configure: HTTP %d %q; the case proves nothing", r.Status, r.Errors)
	}
	earlier := r.Body["auth"].(map[string]any)["client_token"].(string)
	t.Logf("after configure, a recreated %s logs in as %s: HTTP %d", tool.ServiceAccount, tool.VaultAuthRole(), r.Status)

	// Objects agent-sandbox did not create, which disable must leave alone.
	for path, body := range map[string]any{
		"sys/policies/acl/agent-sandbox-theirs":            map[string]any{"policy": `path "secret/*" { capabilities = ["read"] }`},
		"auth/" + ca.VaultAuthMount + "/role/someone-else": map[string]any{"bound_service_account_names": []string{"x"}, "bound_service_account_namespaces": []string{"x"}},
	} {
		if r, err := e.vault.Request(ctx, "PUT", path, e.vault.RootToken, body); err != nil || r.Status/100 != 2 {
			t.Fatalf("write %s: %v %+v", path, err, r)
		}
	}

	code, lines, _ := e.disable(t, "--dry-run")
	if code != 0 || !slices.Contains(lines, "would delete auth role "+tool.VaultAuthRole()+" (Vault refuses this tool's logins)") {
		t.Errorf("dry run: exit %d %q", code, lines)
	}
	if r := login(); r.Status != 200 {
		t.Errorf("the dry run changed Vault: login HTTP %d %q", r.Status, r.Errors)
	}

	code, lines, _ = e.disable(t)
	for _, want := range []string{
		"deleted auth role agent-sandbox-k8s-get-pod-status (Vault refuses this tool's logins)",
		"deleted auth role agent-sandbox-terraform-apply (Vault refuses this tool's logins)",
		"deleted secrets role agent-sandbox-pod-reader (no credential of this scope is minted)",
		"deleted policy agent-sandbox-tool-k8s-get-pod-status (tokens already issued with it can no longer mint credentials)",
		"left policy agent-sandbox-theirs alone: not created by agent-sandbox",
	} {
		if !slices.Contains(lines, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if code != 0 {
		t.Fatalf("disable: exit %d", code)
	}
	// The assertion the hole is about: Vault itself refuses the login.
	if r := login(); r.Status != 400 && r.Status != 403 {
		t.Errorf("login after vault disable: HTTP %d %q, want a refusal", r.Status, r.Errors)
	} else {
		t.Logf("after vault disable, the same login: refused, HTTP %d %q", r.Status, r.Errors)
	}
	// A Vault token issued before disable lost its ACL policy: it mints nothing more.
	if r := creds(earlier); r.Status != 403 {
		t.Errorf("creds with a token issued before disable: HTTP %d %q, want 403", r.Status, r.Errors)
	}
	// Foreign objects stay; so do the mounts and configs configure needs.
	for _, path := range []string{"sys/policies/acl/agent-sandbox-theirs", "auth/" + ca.VaultAuthMount + "/role/someone-else",
		"auth/" + ca.VaultAuthMount + "/config", ca.VaultSecretsMount + "/config"} {
		e.vaultGet(t, path)
	}
	// Idempotent: a second run changes nothing.
	if code, lines, _ := e.disable(t); code != 0 || len(lines) != 2 || lines[0] != "left policy agent-sandbox-theirs alone: not created by agent-sandbox" ||
		!strings.HasPrefix(lines[1], "disabled: ") || !strings.HasSuffix(lines[1], "(0 deleted now)") {
		t.Errorf("second disable: exit %d %q", code, lines)
	}

	// After the next install: configure turns logins on again.
	code, lines, _ = e.configure(t, e.policyFile)
	if code != 0 || !slices.Contains(lines, "created auth role "+tool.VaultAuthRole()) {
		t.Errorf("configure after disable: exit %d %q", code, lines)
	}
	r = login()
	if r.Status != 200 {
		t.Fatalf("login after configure again: HTTP %d %q", r.Status, r.Errors)
	}
	again := r.Body["auth"].(map[string]any)["client_token"].(string)
	if r := creds(again); r.Status != 200 {
		t.Errorf("creds after configure again: HTTP %d %q", r.Status, r.Errors)
	}
	e.vault.Request(ctx, "PUT", "auth/token/revoke-self", again, nil) //nolint:errcheck
	for _, path := range []string{"sys/policies/acl/agent-sandbox-theirs", "auth/" + ca.VaultAuthMount + "/role/someone-else"} {
		e.vault.Request(ctx, "DELETE", path, e.vault.RootToken, nil) //nolint:errcheck
	}
}
