// Package servingcert gives the admission webhook its serving certificate without cert-manager or any
// manual step (--tls-mode=self): a CA and a serving certificate for the webhook's Service kept in one
// Secret shared by every replica, renewed before they expire, written to --cert-dir, and the CA injected
// as caBundle into the webhook configurations that call the Service. With --tls-mode=files (the chart's
// cert-manager mode) cert-manager issues the certificate and its CA injector sets caBundle instead, and
// this package is not used.
//
// Serving the files is not this package's job: the webhook server and the secure metrics server of
// controller-runtime load tls.crt and tls.key from --cert-dir through its certwatcher, which picks up a
// renewal (this package's or cert-manager's) without a restart; the files are written atomically so that
// it never reads half a pair.
//
// Trust role: in the cluster, trusted. It runs in the webhook process before the manager starts and then
// hourly; it holds the CA's private key in the Secret, and decides nothing about sandboxes.
package servingcert

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agent-sandbox/agent-sandbox/internal/atomicfile"
	"github.com/agent-sandbox/agent-sandbox/internal/certs"
	"github.com/agent-sandbox/agent-sandbox/internal/tick"
)

// Lifetimes of the self-managed certificates. The serving certificate is renewed when less than
// renewBefore is left; the CA only when it is about to expire itself.
const (
	caLifetime      = 10 * 365 * 24 * time.Hour
	servingLifetime = 365 * 24 * time.Hour
	renewBefore     = 30 * 24 * time.Hour
)

// SelfManaged gives the webhook a serving certificate without cert-manager or any manual step: a CA and a
// serving certificate kept in a Secret (shared by all replicas), written to the serving folder, and the CA
// injected as caBundle into the webhook configurations that point at this webhook's Service.
type SelfManaged struct {
	// Client talks to the API server directly (not through a cache): it runs before the manager starts.
	Client         client.Client
	Namespace      string
	SecretName     string
	ServiceName    string
	WebhookConfigs []string
	CertDir        string
	Now            func() time.Time
}

// Ensure makes sure the Secret holds a valid CA and serving certificate, writes them to CertDir and
// patches every webhook configuration's caBundle. Replicas racing through it converge on one Secret.
func (s *SelfManaged) Ensure(ctx context.Context) error {
	bundle, err := s.ensureSecret(ctx)
	if err != nil {
		return err
	}
	if err := writeFiles(s.CertDir, bundle); err != nil {
		return err
	}
	return s.injectCABundle(ctx, bundle.ca)
}

// Run re-checks every interval until ctx ends, so that certificates are renewed and a caBundle reset by
// an upgrade is restored.
func (s *SelfManaged) Run(ctx context.Context, interval time.Duration, onError func(error)) {
	tick.Every(ctx, interval, func() {
		if err := s.Ensure(ctx); err != nil {
			onError(err)
		}
	})
}

type certBundle struct{ ca, caKey, cert, key []byte }

func (s *SelfManaged) ensureSecret(ctx context.Context) (certBundle, error) {
	key := types.NamespacedName{Namespace: s.Namespace, Name: s.SecretName}
	var sec corev1.Secret
	err := s.Client.Get(ctx, key, &sec)
	switch {
	case apierrors.IsNotFound(err):
		b, err := s.issue(nil, nil)
		if err != nil {
			return certBundle{}, err
		}
		sec = corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: s.SecretName, Namespace: s.Namespace}, Type: corev1.SecretTypeTLS, Data: b.data()}
		if err := s.Client.Create(ctx, &sec); apierrors.IsAlreadyExists(err) {
			return s.ensureSecret(ctx) // another replica won the race; use its certificates
		} else if err != nil {
			return certBundle{}, fmt.Errorf("create TLS secret %s: %w", key, err)
		}
		return b, nil
	case err != nil:
		return certBundle{}, fmt.Errorf("read TLS secret %s: %w", key, err)
	}
	b := certBundle{ca: sec.Data["ca.crt"], caKey: sec.Data["ca.key"], cert: sec.Data[corev1.TLSCertKey], key: sec.Data[corev1.TLSPrivateKeyKey]}
	if s.valid(b) {
		return b, nil
	}
	caCert, caKey := parseCA(sec.Data["ca.crt"], sec.Data["ca.key"], s.now())
	nb, err := s.issue(caCert, caKey)
	if err != nil {
		return certBundle{}, err
	}
	sec.Data = nb.data()
	sec.Type = corev1.SecretTypeTLS
	if err := s.Client.Update(ctx, &sec); apierrors.IsConflict(err) {
		return s.ensureSecret(ctx)
	} else if err != nil {
		return certBundle{}, fmt.Errorf("renew TLS secret %s: %w", key, err)
	}
	return nb, nil
}

// valid: the serving certificate parses, matches its key, chains to the CA, names the Service, and has
// more than renewBefore left.
func (s *SelfManaged) valid(b certBundle) bool {
	pair, err := tls.X509KeyPair(b.cert, b.key)
	if err != nil {
		return false
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil || s.now().Add(renewBefore).After(leaf.NotAfter) {
		return false
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b.ca) {
		return false
	}
	_, err = leaf.Verify(x509.VerifyOptions{DNSName: s.dnsNames()[2], Roots: pool, CurrentTime: s.now()})
	return err == nil
}

func (s *SelfManaged) dnsNames() []string {
	svc, ns := s.ServiceName, s.Namespace
	return []string{svc, svc + "." + ns, svc + "." + ns + ".svc", svc + "." + ns + ".svc.cluster.local"}
}

// issue creates a serving certificate, and a CA too when none (or an expiring one) is given.
func (s *SelfManaged) issue(caCert *x509.Certificate, caKey *ecdsa.PrivateKey) (certBundle, error) {
	now := s.now()
	ca := &certs.Pair{Cert: caCert, Key: caKey}
	if caCert == nil {
		var err error
		ca, err = certs.Issue(certs.Spec{
			CommonName: "agent-sandbox-webhook-ca",
			NotBefore:  now.Add(-time.Hour), NotAfter: now.Add(caLifetime),
			CA: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		}, nil)
		if err != nil {
			return certBundle{}, fmt.Errorf("create CA: %w", err)
		}
	}
	leaf, err := certs.Issue(certs.Spec{
		CommonName: s.dnsNames()[2], DNSNames: s.dnsNames(),
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(servingLifetime),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, ca)
	if err != nil {
		return certBundle{}, fmt.Errorf("create serving certificate: %w", err)
	}
	keyPEM, err := leaf.KeyPEM()
	if err != nil {
		return certBundle{}, err
	}
	caKeyPEM, err := ca.KeyPEM()
	if err != nil {
		return certBundle{}, err
	}
	return certBundle{ca: ca.CertPEM(), caKey: caKeyPEM, cert: leaf.CertPEM(), key: keyPEM}, nil
}

func (b certBundle) data() map[string][]byte {
	return map[string][]byte{"ca.crt": b.ca, "ca.key": b.caKey, corev1.TLSCertKey: b.cert, corev1.TLSPrivateKeyKey: b.key}
}

func parseCA(certPEM, keyPEM []byte, now time.Time) (*x509.Certificate, *ecdsa.PrivateKey) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil
	}
	c, err := x509.ParseCertificate(cb.Bytes)
	if err != nil || now.Add(servingLifetime).After(c.NotAfter) {
		return nil, nil
	}
	k, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil
	}
	return c, k
}

// writeFiles writes tls.crt and tls.key atomically, so the webhook server's certificate watcher never
// reads a half-written pair.
func writeFiles(dir string, b certBundle) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for name, data := range map[string][]byte{corev1.TLSCertKey: b.cert, corev1.TLSPrivateKeyKey: b.key, "ca.crt": b.ca} {
		path := filepath.Join(dir, name)
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
			continue
		}
		if err := atomicfile.Write(path, data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// injectCABundle sets caBundle on every webhook of the named configurations that calls our Service.
func (s *SelfManaged) injectCABundle(ctx context.Context, ca []byte) error {
	var errs []error
	for _, name := range s.WebhookConfigs {
		errs = append(errs, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var m admissionregistrationv1.MutatingWebhookConfiguration
			if err := s.Client.Get(ctx, types.NamespacedName{Name: name}, &m); err != nil {
				return client.IgnoreNotFound(err)
			}
			changed := false
			for i := range m.Webhooks {
				changed = s.setCA(&m.Webhooks[i].ClientConfig, ca) || changed
			}
			if !changed {
				return nil
			}
			return s.Client.Update(ctx, &m)
		}))
		errs = append(errs, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var v admissionregistrationv1.ValidatingWebhookConfiguration
			if err := s.Client.Get(ctx, types.NamespacedName{Name: name}, &v); err != nil {
				return client.IgnoreNotFound(err)
			}
			changed := false
			for i := range v.Webhooks {
				changed = s.setCA(&v.Webhooks[i].ClientConfig, ca) || changed
			}
			if !changed {
				return nil
			}
			return s.Client.Update(ctx, &v)
		}))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("inject caBundle: %w", err)
	}
	return nil
}

func (s *SelfManaged) setCA(cc *admissionregistrationv1.WebhookClientConfig, ca []byte) bool {
	if cc.Service == nil || cc.Service.Name != s.ServiceName || cc.Service.Namespace != s.Namespace || bytes.Equal(cc.CABundle, ca) {
		return false
	}
	cc.CABundle = ca
	return true
}

func (s *SelfManaged) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}
