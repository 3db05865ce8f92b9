package webhook

import (
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
)

// TestClaimSigning: the mutating endpoint signs a claim UPDATE of a warm Pod — the webhook's signature
// over this claim on this Pod, whatever signature the client sent — and nothing else.
func TestClaimSigning(t *testing.T) {
	w := newWarmFixture(t)
	good := w.claimFor(t, warmTestTool, podParams(), testRequestID, "")
	r := Request{Operation: "UPDATE", Resource: "pods", Namespace: w.job.Namespace, User: testMCPUser}
	forged := withClaim(w.pod, good)
	forged.Annotations[contract.AnnotationClaimSignature] = "v1.client-made"

	sig, ok, err := w.c.signClaim(r, obj(t, forged), obj(t, w.pod))
	if err != nil || !ok {
		t.Fatalf("not signed: %v", err)
	}
	pod := sandbox.PodIdentity{Namespace: w.pod.Namespace, Name: w.pod.Name, UID: string(w.pod.UID)}
	if _, err := sandbox.VerifyClaim(w.c.ClaimSigner.PublicKeys(), pod, good, sig); err != nil {
		t.Fatalf("the webhook's signature does not verify for the Pod: %v", err)
	}
	if sig, ok, _ := w.c.signClaim(Request{Operation: "UPDATE", Resource: "pods", Namespace: w.job.Namespace, DryRun: true}, obj(t, forged), obj(t, w.pod)); !ok || sig != sandbox.DryRunClaimSignature {
		t.Fatalf("dry run: %q %v, want the dry-run marker", sig, ok)
	}
	cold := podOf(t, asServer(t, w.fixture.job(t, warmTestTool, podParams(), "")))
	for name, tc := range map[string]struct {
		r        Request
		obj, old *corev1.Pod
	}{
		"a status update":              {Request{Operation: "UPDATE", Resource: "pods", SubResource: "status", Namespace: w.job.Namespace}, forged, w.pod},
		"a CREATE":                     {Request{Operation: "CREATE", Resource: "pods", Namespace: w.job.Namespace}, forged, w.pod},
		"a claimed Pod":                {r, withClaim(w.pod, good), withClaim(w.pod, good)},
		"a cold Pod":                   {r, withClaim(cold, good), cold},
		"an update that adds no claim": {r, w.pod, w.pod},
		"a claim that is no claim":     {r, withClaim(w.pod, "sh -c id"), w.pod},
	} {
		if _, ok, err := w.c.signClaim(tc.r, obj(t, tc.obj), obj(t, tc.old)); ok || err != nil {
			t.Errorf("%s was signed (%v)", name, err)
		}
	}

	// Through the HTTP endpoint: the patch replaces the client's value.
	review := func(dry bool) admissionv1.AdmissionReview {
		raw := func(p *corev1.Pod) runtime.RawExtension {
			b, _ := json.Marshal(p)
			return runtime.RawExtension{Raw: b}
		}
		return admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Request: &admissionv1.AdmissionRequest{UID: "1", Operation: admissionv1.Update, Name: w.pod.Name, Namespace: w.pod.Namespace,
				Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, DryRun: ptr.To(dry),
				Object: raw(forged), OldObject: raw(w.pod)}}
	}
	body, _ := json.Marshal(review(false))
	rec := httptest.NewRecorder()
	hreq := httptest.NewRequest(http.MethodPost, PathMutatePods, strings.NewReader(string(body)))
	hreq.Header.Set("Content-Type", "application/json")
	claimSigningHandler(w.c).ServeHTTP(rec, hreq)
	var resp admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil || resp.Response == nil {
		t.Fatalf("response %s: %v", rec.Body.String(), err)
	}
	if !resp.Response.Allowed || resp.Response.PatchType == nil {
		t.Fatalf("no patch: %+v", resp.Response)
	}
	var ops []map[string]any
	if err := json.Unmarshal(resp.Response.Patch, &ops); err != nil || len(ops) != 1 {
		t.Fatalf("patch %s", resp.Response.Patch)
	}
	if ops[0]["path"] != "/metadata/annotations/agent-sandbox.dev~1claim-signature" || ops[0]["value"] != sig || ops[0]["op"] != "add" {
		t.Fatalf("patch %v, want the annotation set to the webhook's signature", ops[0])
	}
}

// TestClaimNeedsSignature: the validating endpoint admits a claim only with the webhook's own valid
// signature for this Pod — a claim that did not pass the mutating endpoint, or carries a signature made
// with another key or for another Pod, is refused and records nothing.
func TestClaimNeedsSignature(t *testing.T) {
	w := newWarmFixture(t)
	good := w.claimFor(t, warmTestTool, podParams(), testRequestID, "")
	mcp := Request{User: testMCPUser, Resource: "pods"}
	other, err := GenerateClaimSigner()
	if err != nil {
		t.Fatal(err)
	}
	signed := func(s *ClaimSigner, p sandbox.PodIdentity) string {
		v, err := s.Sign(p, good)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	self := sandbox.PodIdentity{Namespace: w.pod.Namespace, Name: w.pod.Name, UID: string(w.pod.UID)}
	for name, tc := range map[string]struct {
		sig string
		dry bool
	}{
		"unsigned":                               {"", false},
		"signed by another key":                  {signed(other, self), false},
		"signed for another Pod":                 {signed(w.c.ClaimSigner, sandbox.PodIdentity{Namespace: self.Namespace, Name: self.Name + "x", UID: self.UID}), false},
		"signed for an earlier Pod of this name": {signed(w.c.ClaimSigner, sandbox.PodIdentity{Namespace: self.Namespace, Name: self.Name, UID: "00000000-0000-4000-8000-000000000000"}), false},
		"the dry-run marker on a real request":   {sandbox.DryRunClaimSignature, false},
		"a dry run without the dry-run marker":   {"", true},
		"a dry run with a signature of its own":  {signed(w.c.ClaimSigner, self), true},
	} {
		t.Run(name, func(t *testing.T) {
			w.claims.seen = map[string]bool{}
			n := withClaim(w.pod, good)
			if tc.sig != "" {
				n.Annotations[contract.AnnotationClaimSignature] = tc.sig
			}
			r := mcp
			r.DryRun = tc.dry
			if err := w.validate(t, r, n, w.pod); ruleOf(err) != "claim-signature" {
				t.Fatalf("rule %q (%v), want claim-signature", ruleOf(err), err)
			}
			if len(w.claims.seen) != 0 || len(w.anchors.all()) != 0 {
				t.Fatal("a refused claim was recorded")
			}
		})
	}
	t.Run("no signing key", func(t *testing.T) {
		w := newWarmFixture(t)
		n := withClaim(w.pod, good)
		n.Annotations[contract.AnnotationClaimSignature] = signed(w.c.ClaimSigner, self)
		w.c.ClaimSigner = nil
		// Without keys the warm rendering differs too; either way the claim is refused.
		if err := w.validate(t, mcp, n, w.pod); err == nil {
			t.Fatal("admitted without a signing key")
		}
	})
	// The webhook's own signature admits it.
	n := withClaim(w.pod, good)
	n.Annotations[contract.AnnotationClaimSignature] = signed(w.c.ClaimSigner, self)
	if err := w.validate(t, mcp, n, w.pod); err != nil {
		t.Fatalf("the signed claim was refused: %v", err)
	}
	// Once claimed, neither the claim nor its signature changes.
	re := n.DeepCopy()
	re.Annotations[contract.AnnotationClaimSignature] = signed(other, self)
	if err := w.validate(t, mcp, re, n); ruleOf(err) != "immutable" {
		t.Fatalf("signature changed after the claim: rule %q (%v), want immutable", ruleOf(err), err)
	}
}

// TestWarmRenderingPinsKeys: the webhook's public keys are part of the warm rendering, in the agent's and
// the entry point's command lines; a warm Job injected with other keys is not the rendering.
func TestWarmRenderingPinsKeys(t *testing.T) {
	f := newFixture(t)
	j := f.warmJob(t, warmTestTool, "w0123456789a")
	flag := "--claim-keys=" + f.c.ClaimSigner.Keys()
	spec := j.Spec.Template.Spec
	if !contains(spec.Containers[0].Command, flag) {
		t.Errorf("the warm entry point lacks %s: %q", flag, spec.Containers[0].Command)
	}
	if !contains(spec.InitContainers[len(spec.InitContainers)-1].Command, flag) {
		t.Errorf("the credential agent lacks %s", flag)
	}
	f.c.Identities.PoolUsers = []string{testPoolUser}
	other, _ := GenerateClaimSigner()
	tl, _ := f.p.Tool(warmTestTool)
	bad, _ := sandbox.RenderWarmJob(f.p, tl, "w0123456789a")
	InjectWarm(&bad.Spec.Template.ObjectMeta, &bad.Spec.Template.Spec, f.p, tl, other.Keys())
	if _, err := f.checkJob(t, bad, Request{Operation: "CREATE", User: testPoolUser}); err == nil {
		t.Fatal("a warm Job with another key was admitted")
	}
	if _, err := f.checkJob(t, j, Request{Operation: "CREATE", User: testPoolUser}); err != nil {
		t.Fatalf("the warm rendering was refused: %v", err)
	}
}

// TestClaimSigningKeySecret: the first replica creates the Secret, every other one reads the same key;
// older public keys in verify.pub are accepted by warm Pods too.
func TestClaimSigningKeySecret(t *testing.T) {
	c := fake.NewClientBuilder().Build()
	ctx := context.Background()
	a, err := EnsureClaimSigningKey(ctx, c, "agent-sandbox-system", "agent-sandbox-claim-signing")
	if err != nil {
		t.Fatal(err)
	}
	b, err := EnsureClaimSigningKey(ctx, c, "agent-sandbox-system", "agent-sandbox-claim-signing")
	if err != nil {
		t.Fatal(err)
	}
	if a.Keys() != b.Keys() || len(a.PublicKeys()) != 1 {
		t.Fatalf("replicas disagree: %s vs %s", a.Keys(), b.Keys())
	}
	old, _ := GenerateClaimSigner()
	der, _ := x509.MarshalPKIXPublicKey(old.PublicKeys()[0])
	var sec corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: "agent-sandbox-system", Name: "agent-sandbox-claim-signing"}, &sec); err != nil {
		t.Fatal(err)
	}
	sec.Data[ClaimVerifyKeysData] = pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	if err := c.Update(ctx, &sec); err != nil {
		t.Fatal(err)
	}
	r, err := EnsureClaimSigningKey(ctx, c, "agent-sandbox-system", "agent-sandbox-claim-signing")
	if err != nil {
		t.Fatal(err)
	}
	if keys := r.PublicKeys(); len(keys) != 2 || !keys[0].Equal(a.PublicKeys()[0]) || !keys[1].Equal(old.PublicKeys()[0]) {
		t.Fatalf("keys %v, want the signing key's, then the older one", keys)
	}
	sec.Data[ClaimSigningKeyData] = []byte("not a key")
	if err := c.Update(ctx, &sec); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureClaimSigningKey(ctx, c, "agent-sandbox-system", "agent-sandbox-claim-signing"); err == nil {
		t.Fatal("a broken key was loaded")
	}
	if _, err := NewClaimSigner(ed25519.PrivateKey("short")); err == nil {
		t.Fatal("a short key made a signer")
	}
}

// TestClaimSigningRegistration: the mutating configuration sends Pod UPDATEs (main resource) to the
// signing endpoint, failing closed.
func TestClaimSigningRegistration(t *testing.T) {
	m, _ := Configurations(ConfigurationsFor{Name: "x", SandboxNamespace: "agent-sandbox"})
	for _, wh := range m.Webhooks {
		if wh.ClientConfig.Service != nil && *wh.ClientConfig.Service.Path == PathMutatePods {
			r := wh.Rules[0]
			if len(wh.Rules) != 1 || r.Resources[0] != "pods" || len(r.Resources) != 1 || string(r.Operations[0]) != "UPDATE" || string(*wh.FailurePolicy) != "Fail" {
				t.Fatalf("registration %+v", wh)
			}
			return
		}
	}
	t.Fatal("no mutating webhook for", PathMutatePods)
}
