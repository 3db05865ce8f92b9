//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app"
	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/sandboxed"
	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/ledger"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/test/corpus"
	"github.com/agent-sandbox/agent-sandbox/test/harness"
	"github.com/agent-sandbox/agent-sandbox/webhook"
)

// TestWarmClaimSignature (issue 22, finding 1): against a real kube-apiserver with the webhook registered,
// a claim written onto a warm Pod without the webhook — through the pods/status subresource, which the
// pods webhooks do not see — is refused by the Pod's own verifier (the warm entry point's command, run
// on the claim volume as the kubelet would project it from the stored Pod), and a claim made through the
// webhook carries its signature and verifies.
// warmCluster is a real kube-apiserver with the Job controller (no kubelet: Pods stay Pending), the sandbox
// namespace and the warm tool's ServiceAccount, and the webhook registered with the shipped policy, its
// ledgers in ConfigMaps and its claim signing key in a Secret, as production keeps them. The harness's
// admin is the Job controller's and the pool's identity.
type warmCluster struct {
	api     *harness.APIServer
	p       *policy.Compiled
	tool    *policy.Tool
	ns      string
	direct  client.Client
	scheme  *runtime.Scheme
	signer  *webhook.ClaimSigner
	checker *webhook.Checker
}

// startWarmCluster starts it; each option changes the checker before the webhook serves it.
func startWarmCluster(t *testing.T, ctx context.Context, opts ...func(*webhook.Checker)) *warmCluster {
	t.Helper()
	api := harness.StartAPIServer(t, harness.WithControllerManager("job", "serviceaccount-token"))
	p, err := policy.LoadFile("../../policy/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cs := api.Clientset
	ns := p.Spec.Sandbox.Namespace
	for _, n := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{contract.LabelSandboxNamespace: "true",
			"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: ledgerNamespace}},
	} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cs.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: p.Spec.Sandbox.RuntimeClassName}, Handler: "runsc"}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tool, err := p.Tool(corpus.WarmTool)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: tool.ServiceAccount}, AutomountServiceAccountToken: new(false)}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	direct, err := client.New(api.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	// The signing key as production keeps it: a Secret the webhook creates in its namespace.
	signer, err := webhook.EnsureClaimSigningKey(ctx, direct, ledgerNamespace, "agent-sandbox-webhook-claim-signing")
	if err != nil {
		t.Fatal(err)
	}
	records := &ledger.ConfigMapLedger{Client: direct, Namespace: ledgerNamespace}
	checker := &webhook.Checker{Ledger: records, Pods: records, Claims: records, Anchors: records, Cluster: apiReader{direct}, ClaimSigner: signer,
		Identities: webhook.Identities{JobControllerUsers: []string{"harness-admin", webhook.DefaultJobControllerUsers[0]}, PoolUsers: []string{"admin"}}}
	for _, opt := range opts {
		opt(checker)
	}
	checker.SetPolicy(p)
	harness.StartWebhook(t, api, checker)
	return &warmCluster{api: api, p: p, tool: tool, ns: ns, direct: direct, scheme: scheme, signer: signer, checker: checker}
}

func TestWarmClaimSignature(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	w := startWarmCluster(t, ctx)
	api, p, tool, ns, cs, signer := w.api, w.p, w.tool, w.ns, w.api.Clientset, w.signer

	// Two warm Jobs, as the pool submits them; the Job controller makes their Pods (no kubelet: Pending).
	warmPod := func(suffix string) *corev1.Pod {
		t.Helper()
		j, err := sandbox.RenderWarmJob(p, tool, suffix)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cs.BatchV1().Jobs(ns).Create(ctx, j, metav1.CreateOptions{}); err != nil {
			t.Fatalf("the warm Job was refused: %v", err)
		}
		for {
			pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=" + j.Name})
			if err == nil && len(pods.Items) == 1 {
				return &pods.Items[0]
			}
			select {
			case <-ctx.Done():
				t.Fatalf("no Pod for warm Job %s", j.Name)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	forgedPod, goodPod := warmPod("w0000000000f"), warmPod("w0000000000g")
	if err := hasClaimKeys(forgedPod, signer.Keys()); err != nil {
		t.Fatal(err)
	}

	// The forgery of issue 22: the claim annotation through pods/status, with a signature the attacker made
	// up. The claim itself is the policy's rendering — what passes every other check in the Pod — so only
	// the missing signature can refuse it (it was never recorded in the claim ledger, nor anchored).
	id, _ := approval.NewRequestID()
	inv, err := tool.Invoke(map[string]any{"namespace": "demo-app"})
	if err != nil {
		t.Fatal(err)
	}
	good, err := sandbox.RenderClaim(inv, id, nil, corpus.AuditHead)
	if err != nil {
		t.Fatal(err)
	}
	forged := strings.Replace(good, `"argv":["/agent-sandbox","run","pod-status","--namespace=demo-app"]`, `"argv":["/agent-sandbox","version"]`, 1)
	if forged == good {
		t.Fatal("the forged claim is the rendering")
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		contract.AnnotationClaim: good, contract.AnnotationClaimSignature: "v1.AAAA"}}})
	_, err = cs.CoreV1().Pods(ns).Patch(ctx, forgedPod.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	switch {
	case err == nil:
		t.Log("the API server stored a claim written through pods/status (the webhook does not see it); the Pod must refuse it")
	case strings.Contains(err.Error(), "denied"):
		// Admission refuses metadata changes through status subresources too: the Pod-side check is defence
		// in depth. Bypass admission altogether (its registrations removed, as by a cluster admin), so that
		// the Pod's verifier is still what is tested.
		t.Logf("admission refused the status forgery too (%v); writing it with admission bypassed", err)
		if err := bypassAdmission(ctx, api, func() error {
			_, err := cs.CoreV1().Pods(ns).Patch(ctx, forgedPod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("patch through pods/status: %v", err)
	}
	stored, err := cs.CoreV1().Pods(ns).Get(ctx, forgedPod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if stored.Annotations[contract.AnnotationClaim] != good {
		t.Fatalf("the forged claim was not stored: %q", stored.Annotations[contract.AnnotationClaim])
	}
	// The warm entry point, run with its own command line from the stored Pod on the projected volume.
	dir := projectClaimVolume(t, stored)
	cmd := containerCommand(t, stored, contract.ToolContainer)
	done := filepath.Join(dir, "done")
	var out, errOut bytes.Buffer
	args := append(cmd[1:], "--claim-file="+filepath.Join(dir, "claim"), "--done-file="+done,
		"--kubeconfig="+filepath.Join(dir, "kubeconfig"), "--idle-timeout=5s", "--credential-wait=1s")
	code := app.Main(ctx, args, strings.NewReader(""), &out, &errOut)
	if code != 1 || !strings.Contains(errOut.String(), "refused the claim: the claim's signature is not the admission webhook's") || strings.Contains(errOut.String(), `msg=claimed`) {
		t.Fatalf("the warm entry point on the forged claim: exit %d, stderr %q; want a refusal", code, errOut.String())
	}
	t.Logf("forged claim refused in the Pod: %s", firstLine(errOut.String(), "refused the claim"))
	// The credential agent's check refuses it too, and the argv of the original report besides.
	if _, err := sandboxed.VerifyWarmClaim(filepath.Join(dir, "claim"), flagValue(t, containerCommand(t, stored, contract.CredentialAgentContainer), "--claim-keys"),
		flagValue(t, containerCommand(t, stored, contract.CredentialAgentContainer), "--claim-spec")); err == nil {
		t.Fatal("the credential agent's check accepted the forged claim")
	}
	if err := os.WriteFile(filepath.Join(dir, "claim"), []byte(forged), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := sandboxed.VerifyWarmClaim(filepath.Join(dir, "claim"), flagValue(t, containerCommand(t, stored, contract.CredentialAgentContainer), "--claim-keys"),
		flagValue(t, containerCommand(t, stored, contract.CredentialAgentContainer), "--claim-spec")); err == nil {
		t.Fatal("the credential agent's check accepted the forged claim")
	}

	// A proper claim, through the webhook (as the MCP server patches it): admitted, signed for this Pod,
	// and the Pod's verifier accepts it. A client-supplied signature is overwritten.
	id2, _ := approval.NewRequestID()
	good2, _ := sandbox.RenderClaim(inv, id2, nil, corpus.AuditHead)
	patch, _ = json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		contract.AnnotationClaim: good2, contract.AnnotationClaimSignature: "v1.client-chosen"}}})
	claimed, err := cs.CoreV1().Pods(ns).Patch(ctx, goodPod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("the rendered claim was refused: %v", err)
	}
	if sig := claimed.Annotations[contract.AnnotationClaimSignature]; !strings.HasPrefix(sig, "v1.") || sig == "v1.client-chosen" {
		t.Fatalf("the admitted claim's signature is %q, not the webhook's", sig)
	}
	dir = projectClaimVolume(t, claimed)
	agent := containerCommand(t, claimed, contract.CredentialAgentContainer)
	c, err := sandboxed.VerifyWarmClaim(filepath.Join(dir, "claim"), flagValue(t, agent, "--claim-keys"), flagValue(t, agent, "--claim-spec"))
	if err != nil || c.RequestID != id2 {
		t.Fatalf("the Pod's verifier refused the admitted claim: %v", err)
	}
	tc := containerCommand(t, claimed, contract.ToolContainer)
	if _, err := sandboxed.VerifyWarmClaim(filepath.Join(dir, "claim"), flagValue(t, tc, "--claim-keys"), flagValue(t, tc, "--claim-spec")); err != nil {
		t.Fatalf("the warm entry point's verifier refused the admitted claim: %v", err)
	}
	// The admitted signature is bound to its Pod: copied onto the forged Pod's volume, it does not verify.
	other := projectClaimVolume(t, stored)
	for name, v := range map[string]string{"claim": good2, contract.ClaimSignatureFile: claimed.Annotations[contract.AnnotationClaimSignature]} {
		if err := os.WriteFile(filepath.Join(other, name), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := sandboxed.VerifyWarmClaim(filepath.Join(other, "claim"), flagValue(t, tc, "--claim-keys"), flagValue(t, tc, "--claim-spec")); err == nil {
		t.Fatal("a signature moved to another Pod verified")
	}
	// A dry-run claim gets no real signature back.
	fresh := warmPod("w0000000000h")
	id3, _ := approval.NewRequestID()
	good3, _ := sandbox.RenderClaim(inv, id3, nil, corpus.AuditHead)
	patch, _ = json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{contract.AnnotationClaim: good3}}})
	dry, err := cs.CoreV1().Pods(ns).Patch(ctx, fresh.Name, types.MergePatchType, patch, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatalf("dry-run claim: %v", err)
	}
	if sig := dry.Annotations[contract.AnnotationClaimSignature]; sig != sandbox.DryRunClaimSignature {
		t.Fatalf("a dry run returned signature %q", sig)
	}
}

// hasClaimKeys checks that the webhook's injection rendered its keys into both warm containers.
func hasClaimKeys(pod *corev1.Pod, keys string) error {
	for _, list := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for _, c := range list {
			if (c.Name == contract.ToolContainer || c.Name == contract.CredentialAgentContainer) && !contains(c.Command, "--claim-keys="+keys) {
				return fmt.Errorf("container %s lacks the webhook's --claim-keys", c.Name)
			}
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// projectClaimVolume writes the Pod's claim volume as the kubelet projects it (downward API: each item's
// field of the stored Pod) into a new folder, and returns the folder.
func projectClaimVolume(t *testing.T, pod *corev1.Pod) string {
	t.Helper()
	dir := t.TempDir()
	for _, v := range pod.Spec.Volumes {
		if v.Name != contract.ClaimVolume || v.Projected == nil {
			continue
		}
		for _, src := range v.Projected.Sources {
			if src.DownwardAPI == nil {
				continue
			}
			for _, it := range src.DownwardAPI.Items {
				var val string
				switch fp := it.FieldRef.FieldPath; {
				case fp == "metadata.name":
					val = pod.Name
				case fp == "metadata.namespace":
					val = pod.Namespace
				case fp == "metadata.uid":
					val = string(pod.UID)
				case strings.HasPrefix(fp, "metadata.annotations['"):
					val = pod.Annotations[strings.TrimSuffix(strings.TrimPrefix(fp, "metadata.annotations['"), "']")]
				default:
					t.Fatalf("claim volume item %s: field %s not projected by this test", it.Path, fp)
				}
				if err := os.WriteFile(filepath.Join(dir, it.Path), []byte(val), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		return dir
	}
	t.Fatalf("Pod %s has no claim volume", pod.Name)
	return ""
}

func containerCommand(t *testing.T, pod *corev1.Pod, name string) []string {
	t.Helper()
	for _, list := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for _, c := range list {
			if c.Name == name {
				return c.Command
			}
		}
	}
	t.Fatalf("Pod %s has no container %s", pod.Name, name)
	return nil
}

func flagValue(t *testing.T, cmd []string, flag string) string {
	t.Helper()
	for _, a := range cmd {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	t.Fatalf("command %q has no %s", cmd, flag)
	return ""
}

func firstLine(s, with string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, with) {
			return l
		}
	}
	return ""
}

// bypassAdmission runs f with the webhook's registrations removed (as a cluster admin could), then
// restores them.
func bypassAdmission(ctx context.Context, api *harness.APIServer, f func() error) error {
	ar := api.Clientset.AdmissionregistrationV1()
	m, err := ar.MutatingWebhookConfigurations().Get(ctx, "agent-sandbox-test", metav1.GetOptions{})
	if err != nil {
		return err
	}
	v, err := ar.ValidatingWebhookConfigurations().Get(ctx, "agent-sandbox-test", metav1.GetOptions{})
	if err != nil {
		return err
	}
	if err := ar.MutatingWebhookConfigurations().Delete(ctx, m.Name, metav1.DeleteOptions{}); err != nil {
		return err
	}
	if err := ar.ValidatingWebhookConfigurations().Delete(ctx, v.Name, metav1.DeleteOptions{}); err != nil {
		return err
	}
	time.Sleep(2 * time.Second) // the API server's webhook configuration informer
	ferr := f()
	m.ResourceVersion, v.ResourceVersion = "", ""
	if _, err := ar.MutatingWebhookConfigurations().Create(ctx, m, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := ar.ValidatingWebhookConfigurations().Create(ctx, v, metav1.CreateOptions{}); err != nil {
		return err
	}
	time.Sleep(2 * time.Second)
	return ferr
}
