//go:build integration

package integration

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/test/harness"
)

// TestVaultLoginNeedsALivePod is issue 22's third finding against a real Vault dev server and a real
// kube-apiserver: Vault logs a sandbox in only while the Pod its token is bound to exists. The Pod is
// created directly (no scheduler, no kubelet: it never runs) and its token is what the kubelet would
// project: a TokenRequest for the tool's ServiceAccount, bound to the Pod, for the Vault audience.
//
// It starts from what a release with the JWT auth method left in Vault (its own auth mount of type jwt at
// the policy's path), so it also checks that `vault configure` converges such an install.
func TestVaultLoginNeedsALivePod(t *testing.T) {
	ctx := context.Background()
	target := startVaultTarget(t)
	api, vault := target.api, target.vault
	pol, err := policy.LoadFile("../../policy/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ca := pol.Spec.Sandbox.CredentialAgent
	sandboxNS := pol.Spec.Sandbox.Namespace
	kube := api.Clientset
	for _, ns := range []*corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: sandboxNS}}, localNamespace(t, "demo-app")} {
		if _, err := kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tool := range pol.Spec.Tools {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: sandboxNS, Name: tool.ServiceAccount}, AutomountServiceAccountToken: new(false)}
		if _, err := kube.CoreV1().ServiceAccounts(sandboxNS).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tool, err := pol.Tool("k8s_get_pod_status")
	if err != nil {
		t.Fatal(err)
	}
	mount := ca.VaultAuthMount

	vaultDo := func(method, path, token string, body any) *harness.Response {
		t.Helper()
		r, err := vault.Request(ctx, method, path, token, body)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// What the JWT release left: its own (agent-sandbox: described) auth mount of type jwt, with a role.
	if r := vaultDo("POST", "sys/auth/"+mount, vault.RootToken, map[string]any{"type": "jwt",
		"description": "agent-sandbox: sandbox credential agents log in with their Pod-bound service-account token"}); r.Status/100 != 2 {
		t.Fatalf("enable the old jwt mount: %+v", r)
	}
	if r := vaultDo("POST", "auth/"+mount+"/role/"+tool.VaultAuthRole(), vault.RootToken, map[string]any{"role_type": "jwt",
		"bound_audiences": []string{ca.VaultAudience}, "user_claim": "sub", "token_policies": []string{tool.VaultPolicy()}}); r.Status/100 != 2 {
		t.Fatalf("old jwt role: %+v", r)
	}

	configure := func(extra ...string) []string {
		t.Helper()
		var out, errOut bytes.Buffer
		code := app.Main(ctx, target.configureArgs("../../policy/policy.yaml", extra...), strings.NewReader(""), &out, &errOut)
		t.Logf("vault configure %s: exit %d\n%s%s", strings.Join(extra, " "), code, out.String(), errOut.String())
		if code != 0 {
			t.Fatalf("vault configure %s: exit %d", strings.Join(extra, " "), code)
		}
		return strings.Split(strings.TrimSpace(out.String()), "\n")
	}
	mountType := func() string {
		t.Helper()
		r := vaultDo("GET", "sys/auth", vault.RootToken, nil)
		m, _ := r.Data()[mount+"/"].(map[string]any)
		s, _ := m["type"].(string)
		return s
	}
	replaced := fmt.Sprintf(`auth method auth/%s (it was a "jwt" mount, now "kubernetes"; tokens it issued are revoked)`, mount)

	// The plan shows the replacement and changes nothing.
	if lines := configure("--dry-run"); !slices.Contains(lines, "would replace "+replaced) {
		t.Errorf("dry run does not show the replacement of the jwt mount: %q", lines)
	}
	if got := mountType(); got != "jwt" {
		t.Fatalf("after the dry run the auth mount is of type %q", got)
	}
	// The real run replaces the mount and writes the config and roles under it.
	lines := configure()
	for _, want := range []string{
		"replaced " + replaced,
		"created cluster role agent-sandbox-vault-tokenreview",
		"created cluster role binding agent-sandbox-vault-tokenreview",
		"created config auth/" + mount + "/config",
		"created auth role " + tool.VaultAuthRole(),
	} {
		if !slices.Contains(lines, want) {
			t.Errorf("vault configure does not say %q", want)
		}
	}
	if got := mountType(); got != "kubernetes" {
		// Not fatal: what follows shows what a mount of this type lets through.
		t.Errorf("auth mount of type %q after configure, want kubernetes", got)
	}
	// Vault holds the role, read back without agent-sandbox's code.
	d := vaultDo("GET", "auth/"+mount+"/role/"+tool.VaultAuthRole(), vault.RootToken, nil).Data()
	if fmt.Sprint(d["bound_service_account_names"]) != "["+tool.ServiceAccount+"]" || fmt.Sprint(d["bound_service_account_namespaces"]) != "["+sandboxNS+"]" ||
		d["audience"] != ca.VaultAudience || fmt.Sprint(d["token_policies"]) != "["+tool.VaultPolicy()+"]" {
		t.Errorf("auth role: %v", d)
	}
	if d := vaultDo("GET", "auth/"+mount+"/config", vault.RootToken, nil).Data(); d["token_reviewer_jwt_set"] != true || d["disable_local_ca_jwt"] != true {
		t.Errorf("auth config: %v", d)
	}
	// Converged: a second run changes nothing.
	if lines := configure(); len(lines) != 1 || !strings.HasPrefix(lines[0], "unchanged: ") {
		t.Errorf("second run changed something: %q", lines)
	}

	login := func(what, role, jwt string) *harness.Response {
		t.Helper()
		r := vaultDo("PUT", "auth/"+mount+"/login", "", map[string]any{"role": role, "jwt": jwt})
		if r.Status == 200 {
			if tok, _ := r.Body["auth"].(map[string]any)["client_token"].(string); tok != "" {
				vaultDo("PUT", "auth/token/revoke-self", tok, nil)
			}
		}
		t.Logf("%s: HTTP %d %q", what, r.Status, r.Errors)
		return r
	}
	refused := func(what string, r *harness.Response) {
		t.Helper()
		if r.Status != 400 && r.Status != 403 {
			t.Errorf("%s: HTTP %d %q, want a refusal", what, r.Status, r.Errors)
		}
	}
	token := func(audience string, ref *authenticationv1.BoundObjectReference) string {
		t.Helper()
		secs := int64(600)
		tr, err := kube.CoreV1().ServiceAccounts(sandboxNS).CreateToken(ctx, tool.ServiceAccount, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{Audiences: []string{audience}, ExpirationSeconds: &secs, BoundObjectRef: ref}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("token for %s: %v", tool.ServiceAccount, err)
		}
		return tr.Status.Token
	}
	podName := sandbox.JobNamePrefix(tool.Name) + "live-test"
	newPod := func() *corev1.Pod {
		t.Helper()
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: sandboxNS, Name: podName},
			Spec: corev1.PodSpec{ServiceAccountName: tool.ServiceAccount, AutomountServiceAccountToken: new(false),
				Containers: []corev1.Container{{Name: "tool", Image: "x"}}}}
		p, err := kube.CoreV1().Pods(sandboxNS).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	boundTo := func(p *corev1.Pod) *authenticationv1.BoundObjectReference {
		return &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID}
	}

	pod := newPod()
	podToken := token(ca.VaultAudience, boundTo(pod))
	if r := login("the live Pod's token", tool.VaultAuthRole(), podToken); r.Status != 200 {
		t.Fatalf("the token of a live sandbox Pod was refused: HTTP %d %q", r.Status, r.Errors)
	}
	refused("the live Pod's token for another tool's role", login("another tool's role", "agent-sandbox-terraform-apply", podToken))
	refused("a Pod-bound token for the API server's audience", login("wrong audience", tool.VaultAuthRole(), token("https://kubernetes.default.svc", boundTo(pod))))
	// A token bound to nothing: the Kubernetes auth method has no claim constraint that could require a
	// Pod binding, so Vault's answer is logged, not judged. Such a token cannot be had from the API server:
	// the webhook refuses TokenRequests for tool ServiceAccounts except the kubelet's, bound to a sandbox
	// Pod (TestWebhookAdmissionCorpus, the token-request cases).
	login("a token bound to nothing (Vault cannot require a Pod binding; admission refuses its TokenRequest)", tool.VaultAuthRole(), token(ca.VaultAudience, nil))

	// The Pod goes (as after the MCP server deletes its finished Job); its token, read from the node, is
	// kept and tried again.
	zero := int64(0)
	if err := kube.CoreV1().Pods(sandboxNS).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := kube.CoreV1().Pods(sandboxNS).Get(ctx, pod.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	gone := time.Now()
	// The API server caches a successful token authentication for up to 10 s (and reads Pods through an
	// informer), so the refusal may take that long; a JWT auth method accepted the token until it expired.
	var r *harness.Response
	for {
		r = vaultDo("PUT", "auth/"+mount+"/login", "", map[string]any{"role": tool.VaultAuthRole(), "jwt": podToken})
		if r.Status != 200 || time.Since(gone) > 30*time.Second {
			break
		}
		if tok, _ := r.Body["auth"].(map[string]any)["client_token"].(string); tok != "" {
			vaultDo("PUT", "auth/token/revoke-self", tok, nil)
		}
		time.Sleep(250 * time.Millisecond)
	}
	refused("the deleted Pod's token", r)
	t.Logf("the deleted Pod's token: HTTP %d %q, %s after the Pod was gone", r.Status, r.Errors, time.Since(gone).Round(10*time.Millisecond))
	// ... and stays refused, also once a new Pod of the same name (another UID) exists.
	refused("the deleted Pod's token, again", login("the deleted Pod's token, again", tool.VaultAuthRole(), podToken))
	again := newPod()
	refused("the deleted Pod's token while a new Pod has its name", login("the deleted Pod's token, same name, new UID", tool.VaultAuthRole(), podToken))
	// The control: the new Pod's own token logs in, so the refusals above are about the Pod, not Vault.
	if r := login("the new Pod's token", tool.VaultAuthRole(), token(ca.VaultAudience, boundTo(again))); r.Status != 200 {
		t.Errorf("the new live Pod's token was refused: HTTP %d %q", r.Status, r.Errors)
	}
}
