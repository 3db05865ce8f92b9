package webhook

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/rules"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
)

// Claim signatures (issue 22, "a warm Pod runs only what admission admitted"). The mutating endpoint below
// signs the claim of every claim UPDATE of a warm Pod on the main pods resource, overwriting whatever
// signature the client sent; checkClaim then admits the claim only with the webhook's own valid signature
// (requireClaimSignature). The warm Pod verifies the same signature with the public keys the injection
// rendered into it (InjectWarm) before it mints or runs anything: a claim that reached the Pod without
// this webhook — through pods/status, say — is refused in the Pod.

// PathMutatePods is the mutating endpoint that signs warm claims.
const PathMutatePods = "/mutate-pods"

// ClaimSigner holds the webhook's claim signing key, shared by every replica through a Secret
// (EnsureClaimSigningKey), and the public keys a warm Pod accepts.
type ClaimSigner struct {
	key ed25519.PrivateKey
	// verify are the public keys rendered into warm Pods: the signing key's first, then older ones still
	// accepted during a rotation.
	verify []ed25519.PublicKey
	flag   string
}

// NewClaimSigner signs with key; warm Pods accept its public key and also the older ones.
func NewClaimSigner(key ed25519.PrivateKey, older ...ed25519.PublicKey) (*ClaimSigner, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, errors.New("the claim signing key is not an Ed25519 private key")
	}
	pub, _ := key.Public().(ed25519.PublicKey)
	verify := []ed25519.PublicKey{pub}
	for _, k := range older {
		if len(k) != ed25519.PublicKeySize {
			return nil, errors.New("an older claim verification key is not an Ed25519 public key")
		}
		if !k.Equal(pub) {
			verify = append(verify, k)
		}
	}
	return &ClaimSigner{key: key, verify: verify, flag: sandbox.FormatClaimKeys(verify)}, nil
}

// GenerateClaimSigner makes a signer with a fresh key (tests, and the first start of a webhook).
func GenerateClaimSigner() (*ClaimSigner, error) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	return NewClaimSigner(key)
}

// Keys returns the --claim-keys value rendered into warm Pods.
func (s *ClaimSigner) Keys() string {
	if s == nil {
		return ""
	}
	return s.flag
}

// PublicKeys returns the keys warm Pods accept.
func (s *ClaimSigner) PublicKeys() []ed25519.PublicKey { return s.verify }

// Sign returns the signature annotation for claim on pod.
func (s *ClaimSigner) Sign(pod sandbox.PodIdentity, claim string) (string, error) {
	return sandbox.SignClaim(s.key, pod, claim)
}

// claimKeys is the --claim-keys value of this webhook's warm rendering ("" without a signer: a Pod
// rendered so refuses every claim).
func (c *Checker) claimKeys() string { return c.ClaimSigner.Keys() }

// podIdentity names the Pod of an admission request's old object.
func podIdentity(namespace string, old object) sandbox.PodIdentity {
	name, _ := old.meta()["name"].(string)
	uid, _ := old.meta()["uid"].(string)
	return sandbox.PodIdentity{Namespace: namespace, Name: name, UID: uid}
}

// requireClaimSignature admits a claim only with the signature this webhook's mutating endpoint wrote:
// valid for this Pod on a real request, the dry-run marker on a dry run (which must not hand out a real
// signature of a claim no ledger recorded).
func (c *Checker) requireClaimSignature(req Request, obj, old object, raw string) error {
	sig := obj.annotations()[contract.AnnotationClaimSignature]
	if req.DryRun {
		if sig != sandbox.DryRunClaimSignature {
			return deny(rules.ClaimSignature, "a claim is signed by the webhook's mutating endpoint (%s), which marks a dry run %q; this one carries %q", PathMutatePods, sandbox.DryRunClaimSignature, sig)
		}
		return nil
	}
	if c.ClaimSigner == nil {
		return deny(rules.ClaimSignature, "the webhook has no claim signing key, so no warm Pod could verify a claim")
	}
	if _, err := sandbox.VerifyClaim(c.ClaimSigner.PublicKeys(), podIdentity(req.Namespace, old), raw, sig); err != nil {
		return deny(rules.ClaimSignature, "%v; only the webhook's mutating endpoint (%s) signs claims", err, PathMutatePods)
	}
	return nil
}

// signClaim returns the signature annotation value a claim UPDATE gets, or ok false when the request is no
// claim to sign: not an UPDATE of a warm Pod on the main resource that adds the claim annotation, or a
// claim that does not even parse (the validating webhook refuses it with the reason).
func (c *Checker) signClaim(req Request, obj, old object) (value string, ok bool, err error) {
	if req.Operation != "UPDATE" || req.SubResource != "" || req.Resource != "pods" || obj == nil || old == nil ||
		!isWarm(old.labels()) || isClaimed(old) {
		return "", false, nil
	}
	raw := obj.annotations()[contract.AnnotationClaim]
	if raw == "" {
		return "", false, nil
	}
	if _, err := sandbox.ParseClaim(raw); err != nil {
		return "", false, nil
	}
	if req.DryRun {
		return sandbox.DryRunClaimSignature, true, nil
	}
	if c.ClaimSigner == nil {
		return "", false, errors.New("the webhook has no claim signing key")
	}
	v, err := c.ClaimSigner.Sign(podIdentity(req.Namespace, old), raw)
	if err != nil {
		return "", false, err
	}
	return v, true, nil
}

// claimSigningHandler is the mutating endpoint PathMutatePods. It never denies: what it does not sign, the
// validating webhook refuses with the reason.
func claimSigningHandler(c *Checker) http.Handler {
	return &admission.Webhook{Handler: admission.HandlerFunc(func(ctx context.Context, req admission.Request) admission.Response {
		r := requestOf(req)
		if len(req.Object.Raw) == 0 || len(req.OldObject.Raw) == 0 {
			return admission.Allowed("")
		}
		obj, err := decodeObject(req.Object.Raw)
		if err != nil {
			return admission.Allowed("")
		}
		old, err := decodeObject(req.OldObject.Raw)
		if err != nil {
			return admission.Allowed("")
		}
		sig, ok, err := c.signClaim(r, obj, old)
		if err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "cannot sign the claim", "pod", req.Name)
			return admission.Allowed("")
		}
		if !ok {
			return admission.Allowed("")
		}
		// A JSON patch that sets the one annotation (the claim is there, so the map exists), whatever the
		// client put there.
		patch := []map[string]any{{"op": "add", "path": "/metadata/annotations/" + jsonPointerEscape(contract.AnnotationClaimSignature), "value": sig}}
		raw, err := json.Marshal(patch)
		if err != nil {
			return admission.Errored(http.StatusInternalServerError, err)
		}
		pt := admissionv1.PatchTypeJSONPatch
		ctrl.LoggerFrom(ctx).V(1).Info("signed warm claim", "pod", req.Name, "namespace", req.Namespace, "dryRun", r.DryRun)
		return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{Allowed: true, Patch: raw, PatchType: &pt}}
	})}
}

// jsonPointerEscape escapes a map key for a JSON pointer (RFC 6901).
func jsonPointerEscape(s string) string {
	out := make([]byte, 0, len(s)+4)
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '~':
			out = append(out, '~', '0')
		case '/':
			out = append(out, '~', '1')
		default:
			out = append(out, s[i])
		}
	}
	return string(out)
}

// claimSigningWebhook is the registration of PathMutatePods: UPDATEs of Pods (the main resource only: a
// subresource never carries a claim the webhook signs) in sandbox namespaces.
func claimSigningWebhook(cc admissionregistrationv1.WebhookClientConfig, timeout int32) admissionregistrationv1.MutatingWebhook {
	return admissionregistrationv1.MutatingWebhook{
		Name:         "pods.mutate.agent-sandbox.dev",
		ClientConfig: cc,
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
			Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"},
				Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
		}},
		FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
		MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
		SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
		TimeoutSeconds:          ptr.To(timeout),
		NamespaceSelector:       SandboxNamespaceSelector(),
		AdmissionReviewVersions: []string{"v1"},
		// Never: a mutating webhook after this one that changes the claim invalidates the signature, and the
		// validating webhook then refuses the claim.
		ReinvocationPolicy: ptr.To(admissionregistrationv1.NeverReinvocationPolicy),
	}
}

// Keys of the claim signing Secret.
const (
	// ClaimSigningKeyData holds the signing key, a PKCS #8 "PRIVATE KEY" PEM block.
	ClaimSigningKeyData = "signing.key"
	// ClaimVerifyKeysData optionally holds older public keys ("PUBLIC KEY" PEM blocks, PKIX) that warm Pods
	// still accept during a rotation.
	ClaimVerifyKeysData = "verify.pub"
)

// EnsureClaimSigningKey reads the claim signing key from the Secret namespace/name, creating the Secret
// with a fresh key when there is none. Replicas racing through it converge on one Secret (create is
// atomic; the loser reads the winner's key).
func EnsureClaimSigningKey(ctx context.Context, c client.Client, namespace, name string) (*ClaimSigner, error) {
	key := types.NamespacedName{Namespace: namespace, Name: name}
	for attempt := 0; attempt < 3; attempt++ {
		var sec corev1.Secret
		err := c.Get(ctx, key, &sec)
		switch {
		case apierrors.IsNotFound(err):
			_, priv, err := ed25519.GenerateKey(rand.Reader)
			if err != nil {
				return nil, err
			}
			der, err := x509.MarshalPKCS8PrivateKey(priv)
			if err != nil {
				return nil, err
			}
			sec = corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace,
				Labels: map[string]string{"app.kubernetes.io/managed-by": "agent-sandbox-webhook"}},
				Type: corev1.SecretTypeOpaque,
				Data: map[string][]byte{ClaimSigningKeyData: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})}}
			if err := c.Create(ctx, &sec); apierrors.IsAlreadyExists(err) {
				continue // another replica won the race: use its key
			} else if err != nil {
				return nil, fmt.Errorf("create claim signing Secret %s: %w", key, err)
			}
			return NewClaimSigner(priv)
		case err != nil:
			return nil, fmt.Errorf("read claim signing Secret %s: %w", key, err)
		}
		return ClaimSignerFromSecret(&sec)
	}
	return nil, fmt.Errorf("claim signing Secret %s: created and gone again", key)
}

// ClaimSignerFromSecret reads a claim signing Secret's data.
func ClaimSignerFromSecret(sec *corev1.Secret) (*ClaimSigner, error) {
	block, _ := pem.Decode(sec.Data[ClaimSigningKeyData])
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("Secret %s/%s: %s is not a PRIVATE KEY PEM block", sec.Namespace, sec.Name, ClaimSigningKeyData)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("Secret %s/%s: %s: %w", sec.Namespace, sec.Name, ClaimSigningKeyData, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("Secret %s/%s: %s is not an Ed25519 key", sec.Namespace, sec.Name, ClaimSigningKeyData)
	}
	var older []ed25519.PublicKey
	rest := sec.Data[ClaimVerifyKeysData]
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		pk, err := x509.ParsePKIXPublicKey(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("Secret %s/%s: %s: %w", sec.Namespace, sec.Name, ClaimVerifyKeysData, err)
		}
		ek, ok := pk.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("Secret %s/%s: %s holds a key that is not Ed25519", sec.Namespace, sec.Name, ClaimVerifyKeysData)
		}
		older = append(older, ek)
	}
	return NewClaimSigner(priv, older...)
}
