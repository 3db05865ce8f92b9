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

	"github.com/agent-sandbox/agent-sandbox/broker"
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

// Login logs in to the tool's JWT auth role with jwt, as the credential agent does.
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
	Pod, PodUID               string // empty: not bound to a Pod
	Secret                    string // bound to a Secret instead
	Audience                  string
	Expiry                    time.Time
	OtherKey                  bool
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
	k8s := map[string]any{"namespace": t.Namespace, "serviceaccount": map[string]any{"name": t.ServiceAccount, "uid": "11111111-2222-4333-8444-555555555555"}}
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
// sandbox Pod: Vault itself must refuse them, whatever admission did.
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
			tok, err := v.Sign.sign(t)
			if err != nil {
				return err
			}
			return v.Login(ctx, role, tok)
		}
	}
	base := saToken{Namespace: ns, ServiceAccount: apply.ServiceAccount, Audience: vault}
	with := func(f func(*saToken)) saToken { t := base; f(&t); return t }
	c := func(n, why string, t saToken) Case {
		return Case{Class: "vault", Name: n, Rule: "vault:" + why, Submit: login(t)}
	}
	return []Case{
		c("Vault login with an unbound tool token (what `kubectl create token --audience vault` gives)", "kubernetes.io/pod", base),
		c("Vault login with a tool token bound to a Secret", "kubernetes.io/pod", with(func(t *saToken) { t.Secret = "some-secret" })),
		c("Vault login with a tool token bound to another tool's Pod", "kubernetes.io/pod/name", with(func(t *saToken) {
			t.Pod, t.PodUID = sandbox.JobNamePrefix("k8s_get_pod_status")+"0123456789ab-x7k2p", "77777777-2222-4333-8444-555555555555"
		})),
		c("Vault login with a token of another namespace's tool-terraform-apply", "", with(func(t *saToken) {
			t.Namespace, t.Pod, t.PodUID = "demo-app", applyPod, "77777777-2222-4333-8444-555555555555"
		})),
		c("Vault login with a Pod-bound tool token for the API server's audience", "aud", with(func(t *saToken) {
			t.Audience, t.Pod, t.PodUID = "https://kubernetes.default.svc.cluster.local", applyPod, "77777777-2222-4333-8444-555555555555"
		})),
		c("Vault login with an expired Pod-bound tool token", "", with(func(t *saToken) {
			t.Pod, t.PodUID, t.Expiry = applyPod, "77777777-2222-4333-8444-555555555555", time.Now().Add(-10*time.Minute)
		})),
		c("Vault login with a Pod-bound tool token signed by another key", "", with(func(t *saToken) {
			t.Pod, t.PodUID, t.OtherKey = applyPod, "77777777-2222-4333-8444-555555555555", true
		})),
	}
}

// BoundLoginWorks logs in with a token exactly like the kubelet's for a (made-up) terraform_apply
// sandbox Pod: the control that shows the refusals above are not Vault refusing everything.
func (e *Env) BoundLoginWorks(ctx context.Context) error {
	apply, _ := e.Policy.Tool("terraform_apply")
	tok, err := e.Vault.Sign.sign(saToken{Namespace: e.Namespace(), ServiceAccount: apply.ServiceAccount, Audience: e.Policy.Spec.Sandbox.CredentialAgent.VaultAudience,
		Pod: sandbox.JobNamePrefix("terraform_apply") + "0123456789abcdef01234567-x7k2p", PodUID: "77777777-2222-4333-8444-555555555555"})
	if err != nil {
		return err
	}
	return e.Vault.Login(ctx, apply.VaultAuthRole(), tok)
}
