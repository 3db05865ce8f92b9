package harness

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/agent-sandbox/agent-sandbox/webhook"
)

// Webhook is agent-sandbox's admission webhook served in-process and registered with an API server
// through real Mutating- and ValidatingWebhookConfigurations (URL client configs on 127.0.0.1 instead of a
// Service, the only difference from the Helm chart's registration).
type Webhook struct {
	URL     string
	Metrics *webhook.Metrics
	cancel  context.CancelFunc
	done    chan struct{}
}

// StartWebhook serves the handlers of checker with a throwaway CA and registers them with api. The
// registration uses webhook.Configurations, the reference the chart is tested against.
func StartWebhook(t testing.TB, api *APIServer, checker *webhook.Checker) *Webhook {
	t.Helper()
	dir := t.TempDir()
	caPEM := writeServingCert(t, dir)
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	m, err := webhook.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	srv := crwebhook.NewServer(crwebhook.Options{Host: "127.0.0.1", Port: port, CertDir: dir})
	for path, h := range webhook.Handlers(scheme, checker, m) {
		srv.Register(path, h)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &Webhook{URL: "https://127.0.0.1:" + strconv.Itoa(port), Metrics: m, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		if err := srv.Start(ctx); err != nil {
			t.Logf("webhook server: %v", err)
		}
	}()
	t.Cleanup(w.Stop)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := tls.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // readiness probe only
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("webhook server did not listen on %d: %v", port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	mut, val := webhook.Configurations(webhook.ConfigurationsFor{Name: "agent-sandbox-test", ServiceNamespace: "unused", ServiceName: "unused", Port: 443})
	toURL := func(cc *admissionregistrationv1.WebhookClientConfig) {
		u := w.URL + *cc.Service.Path
		cc.Service, cc.URL, cc.CABundle = nil, &u, caPEM
	}
	for i := range mut.Webhooks {
		toURL(&mut.Webhooks[i].ClientConfig)
	}
	for i := range val.Webhooks {
		toURL(&val.Webhooks[i].ClientConfig)
	}
	ar := api.Clientset.AdmissionregistrationV1()
	if _, err := ar.MutatingWebhookConfigurations().Create(context.Background(), mut, metav1.CreateOptions{}); err != nil {
		t.Fatalf("register mutating webhook: %v", err)
	}
	if _, err := ar.ValidatingWebhookConfigurations().Create(context.Background(), val, metav1.CreateOptions{}); err != nil {
		t.Fatalf("register validating webhook: %v", err)
	}
	return w
}

// Stop shuts the webhook server down; the registrations stay, so the API server now fails closed.
func (w *Webhook) Stop() {
	w.cancel()
	<-w.done
}

func writeServingCert(t testing.TB, dir string) []byte {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "harness-webhook-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	must(os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600))
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
}
