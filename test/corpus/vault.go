package corpus

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agent-sandbox/agent-sandbox/broker"
	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
)

// VaultTarget is where the Vault-direct cases log in, and how they get tokens the way an attacker who
// bypassed admission would: Sign makes a service-account token with the cluster's own signing key, as the
// API server would issue one (a token "obtained elsewhere").
type VaultTarget struct {
	Addr      string
	AuthMount string
	Sign      *TokenSigner
}

// LoginRefused is Vault refusing a login.
type LoginRefused struct{ Err error }

func (e *LoginRefused) Error() string { return "vault refused the login: " + e.Err.Error() }
func (e *LoginRefused) Unwrap() error { return e.Err }

// Login logs in to the tool's auth role with jwt, as the credential agent does.
func (v VaultTarget) Login(ctx context.Context, role, jwt string) error {
	c, err := broker.NewClient(v.Addr, "", "")
	if err != nil {
		return err
	}
	if _, err := c.Login(ctx, v.AuthMount, role, []byte(jwt)); err != nil {
		var ve *broker.VaultError
		if errors.As(err, &ve) && (ve.Status == 400 || ve.Status == 403) {
			return &LoginRefused{Err: err}
		}
		return err
	}
	_ = c.RevokeSelf(ctx)
	return nil
}

// TokenSigner signs service-account tokens with the cluster's key.
type TokenSigner struct {
	Issuer string
	key    crypto.Signer
	other  crypto.Signer
}

// NewTokenSigner loads the cluster's service-account signing key (PEM, RSA) from keyFile.
func NewTokenSigner(keyFile, issuer string) (*TokenSigner, error) {
	raw, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, err
	}
	b, _ := pem.Decode(raw)
	if b == nil {
		return nil, fmt.Errorf("%s holds no PEM key", keyFile)
	}
	var key any
	if key, err = x509.ParsePKCS1PrivateKey(b.Bytes); err != nil {
		if key, err = x509.ParsePKCS8PrivateKey(b.Bytes); err != nil {
			if key, err = x509.ParseECPrivateKey(b.Bytes); err != nil {
				return nil, fmt.Errorf("%s: %w", keyFile, err)
			}
		}
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%s: not a signing key", keyFile)
	}
	// The impostor key has the cluster key's type, so that only the key differs.
	var other crypto.Signer
	if _, ok := signer.Public().(*ecdsa.PublicKey); ok {
		other, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	} else {
		other, err = rsa.GenerateKey(rand.Reader, 2048)
	}
	if err != nil {
		return nil, err
	}
	return &TokenSigner{Issuer: issuer, key: signer, other: other}, nil
}

// saToken are the claims of a service-account token.
type saToken struct {
	Namespace, ServiceAccount string
	// ServiceAccountUID is the ServiceAccount's UID (empty: a made-up one). Vault's Kubernetes auth method
	// asks the API server about every token, which refuses one naming another UID than the
	// ServiceAccount's: tokens that should be refused for another reason carry the real one.
	ServiceAccountUID string
	Pod, PodUID       string // empty: not bound to a Pod
	Secret            string // bound to a Secret instead
	Audience          string
	Expiry            time.Time
	OtherKey          bool
}

func (s *TokenSigner) sign(t saToken) (string, error) {
	key := s.key
	if t.OtherKey {
		key = s.other
	}
	alg := jose.RS256
	if _, ok := key.Public().(*ecdsa.PublicKey); ok {
		alg = jose.ES256
	}
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		return "", err
	}
	now := time.Now()
	if t.Expiry.IsZero() {
		t.Expiry = now.Add(10 * time.Minute)
	}
	if t.ServiceAccountUID == "" {
		t.ServiceAccountUID = "11111111-2222-4333-8444-555555555555"
	}
	k8s := map[string]any{"namespace": t.Namespace, "serviceaccount": map[string]any{"name": t.ServiceAccount, "uid": t.ServiceAccountUID}}
	if t.Pod != "" {
		k8s["pod"] = map[string]any{"name": t.Pod, "uid": t.PodUID}
	}
	if t.Secret != "" {
		k8s["secret"] = map[string]any{"name": t.Secret, "uid": "66666666-2222-4333-8444-555555555555"}
	}
	claims := map[string]any{
		"iss": s.Issuer, "sub": "system:serviceaccount:" + t.Namespace + ":" + t.ServiceAccount,
		"aud": []string{t.Audience}, "iat": now.Add(-time.Minute).Unix(), "nbf": now.Add(-time.Minute).Unix(), "exp": t.Expiry.Unix(),
		"kubernetes.io": k8s,
	}
	return jwt.Signed(sig).Claims(claims).Serialize()
}

// vaultCases log in to Vault with tokens that reached an attacker some other way than the kubelet of a
// sandbox Pod: Vault itself must refuse them, whatever admission did. Each is signed with the cluster's
// key, with the right issuer and the tool ServiceAccount's real UID, so that only what the case names is
// wrong with it.
//
// Vault's Kubernetes auth method checks the ServiceAccount, namespace, audience and expiry itself and then
// asks the API server (TokenReview), which refuses a token whose Pod (or Secret) does not exist, has
// another UID, or whose signature is not the cluster's; Vault then answers only "permission denied".
// What it cannot check, and the JWT auth method of earlier releases did: that the token is bound to a Pod
// at all, and to a Pod of the tool. Such tokens cannot be had from the API server: the webhook refuses
// TokenRequests for tool ServiceAccounts except the kubelet's, bound to a sandbox Pod of the tool, and
// token Secrets (the token-request cases); so the unbound-token and another-tool's-Pod cases are gone
// from here. A holder of the signing key can forge any token, including one for a live Pod.
func (e *Env) vaultCases() []Case {
	v := e.Vault
	ns := e.Namespace()
	vault := e.Policy.Spec.Sandbox.CredentialAgent.VaultAudience
	apply, err := e.Policy.Tool("terraform_apply")
	if err != nil {
		panic(err)
	}
	role := apply.VaultAuthRole()
	applyPod := sandbox.JobNamePrefix("terraform_apply") + "0123456789abcdef01234567-x7k2p"
	login := func(t saToken) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			if v.Sign == nil {
				return errors.New("no token signer: the Vault-direct cases need the cluster's service-account signing key")
			}
			if t.ServiceAccountUID == "" && t.Namespace == ns {
				uid, err := e.serviceAccountUID(ctx, t.ServiceAccount)
				if err != nil {
					return err
				}
				t.ServiceAccountUID = uid
			}
			tok, err := v.Sign.sign(t)
			if err != nil {
				return err
			}
			return v.Login(ctx, role, tok)
		}
	}
	base := saToken{Namespace: ns, ServiceAccount: apply.ServiceAccount, Audience: vault, Pod: applyPod, PodUID: "77777777-2222-4333-8444-555555555555"}
	with := func(f func(*saToken)) saToken { t := base; f(&t); return t }
	c := func(n, why string, t saToken) Case {
		return Case{Class: "vault", Name: n, Rule: "vault:" + why, Submit: login(t)}
	}
	return []Case{
		{Class: "vault", Name: "Vault refuses the token of a deleted sandbox Pod", Rule: "vault:permission denied", Submit: e.deletedPodLogin},
		c("Vault login with a tool token bound to a sandbox Pod that does not exist", "permission denied", base),
		c("Vault login with a tool token bound to a Secret that does not exist", "permission denied", with(func(t *saToken) { t.Pod, t.PodUID, t.Secret = "", "", "some-secret" })),
		c("Vault login with a tool token of a deleted and re-created ServiceAccount (another UID)", "permission denied", with(func(t *saToken) {
			t.ServiceAccountUID = "88888888-2222-4333-8444-555555555555"
		})),
		c("Vault login with a token of another namespace's tool-terraform-apply", "namespace not authorized", with(func(t *saToken) { t.Namespace = "demo-app" })),
		c("Vault login with a Pod-bound tool token for the API server's audience", "aud", with(func(t *saToken) { t.Audience = "https://kubernetes.default.svc.cluster.local" })),
		c("Vault login with an expired Pod-bound tool token", "", with(func(t *saToken) { t.Expiry = time.Now().Add(-10 * time.Minute) })),
		c("Vault login with a Pod-bound tool token signed by another key", "permission denied", with(func(t *saToken) { t.OtherKey = true })),
	}
}

// serviceAccountUID is the UID of a ServiceAccount of the sandbox namespace.
func (e *Env) serviceAccountUID(ctx context.Context, name string) (string, error) {
	sa, err := e.Admin.CoreV1().ServiceAccounts(e.Namespace()).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("ServiceAccount %s: %w", name, err)
	}
	return string(sa.UID), nil
}

// podToken signs what the kubelet projects into pod's credential agent: a token of the Pod's
// ServiceAccount (its real UID), bound to the Pod (its real name and UID), for the Vault audience.
func (e *Env) podToken(ctx context.Context, pod *corev1.Pod) (string, error) {
	if e.Vault.Sign == nil {
		return "", errors.New("no token signer: the Vault-direct cases need the cluster's service-account signing key")
	}
	uid, err := e.serviceAccountUID(ctx, pod.Spec.ServiceAccountName)
	if err != nil {
		return "", err
	}
	return e.Vault.Sign.sign(saToken{Namespace: pod.Namespace, ServiceAccount: pod.Spec.ServiceAccountName, ServiceAccountUID: uid,
		Audience: e.Policy.Spec.Sandbox.CredentialAgent.VaultAudience, Pod: pod.Name, PodUID: string(pod.UID)})
}

// deletedPodLogin is issue 22's third finding: the token of a sandbox Pod that has been deleted, kept by
// whoever read it from the node. A real sandbox Job of the read tool is admitted, its Pod's token logs in
// while the Pod exists (else the case fails: it would prove nothing), then the Job and the Pod are deleted
// and the same token must be refused. The API server caches a successful token review for up to 10 s,
// so the refusal is awaited for 30 s; the JWT auth method accepted the token until it expired.
func (e *Env) deletedPodLogin(ctx context.Context) error {
	tool, err := e.Policy.Tool("k8s_get_pod_status")
	if err != nil {
		return err
	}
	job, err := e.SafeJob(ctx, false)
	if err != nil {
		return err
	}
	jobs := e.Admin.BatchV1().Jobs(e.Namespace())
	bg := metav1.DeletePropagationBackground
	defer func() { _ = jobs.Delete(context.Background(), job.Name, metav1.DeleteOptions{PropagationPolicy: &bg}) }()
	pod, err := e.WaitForPod(ctx, job)
	if err != nil {
		return err
	}
	tok, err := e.podToken(ctx, pod)
	if err != nil {
		return err
	}
	if err := e.Vault.Login(ctx, tool.VaultAuthRole(), tok); err != nil {
		return fmt.Errorf("control: the token of live sandbox Pod %s was not accepted: %w", pod.Name, err)
	}
	if err := jobs.Delete(ctx, job.Name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		return err
	}
	pods := e.Admin.CoreV1().Pods(e.Namespace())
	if err := pods.Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	// Gone, not terminating: the API server still accepts the token of a Pod that is terminating.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && p.UID != pod.UID) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sandbox Pod %s still exists 2 minutes after its deletion", pod.Name)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		err := e.Vault.Login(ctx, tool.VaultAuthRole(), tok)
		if err != nil || time.Now().After(deadline) {
			// nil: still accepted 30 s after the Pod was gone, and the case fails.
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// liveSandboxPod is a sandbox Pod of tool that exists and is not being deleted.
func (e *Env) liveSandboxPod(ctx context.Context, tool string) (*corev1.Pod, error) {
	pods, err := e.Admin.CoreV1().Pods(e.Namespace()).List(ctx, metav1.ListOptions{LabelSelector: contract.LabelTool + "=" + tool})
	if err != nil {
		return nil, err
	}
	for i := range pods.Items {
		if p := &pods.Items[i]; p.DeletionTimestamp == nil && p.Annotations[contract.AnnotationInjected] == "true" {
			return p, nil
		}
	}
	return nil, fmt.Errorf("no live sandbox Pod of %s in %s", tool, e.Namespace())
}

// BoundLoginWorks logs in with a token exactly like the kubelet's for a live sandbox Pod of the read tool
// (the safe Job's): the control that shows the refusals above are not Vault refusing everything.
func (e *Env) BoundLoginWorks(ctx context.Context) error {
	tool, err := e.Policy.Tool("k8s_get_pod_status")
	if err != nil {
		return err
	}
	pod, err := e.liveSandboxPod(ctx, tool.Name)
	if err != nil {
		return err
	}
	tok, err := e.podToken(ctx, pod)
	if err != nil {
		return err
	}
	return e.Vault.Login(ctx, tool.VaultAuthRole(), tok)
}
