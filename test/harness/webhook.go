package harness

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
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
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/agent-sandbox/agent-sandbox/webhook"

	"github.com/agent-sandbox/agent-sandbox/internal/certs"
)

// Webhook is agent-sandbox's admission webhook served in-process and registered with an API server
// through real Mutating- and ValidatingWebhookConfigurations (URL client configs on 127.0.0.1 instead of a
// Service, the only difference from the Helm chart's registration).
type Webhook struct {
	URL     string
	Metrics *webhook.Metrics
	cancel  context.CancelFunc
	done    chan struct{}
	// serve starts the server again on the same address, certificate and handlers (Restart).
	serve func() error
}

// StartWebhook serves the handlers of checker with a throwaway CA and registers them with api. The
// registration uses webhook.Configurations, the reference the chart is tested against.
func StartWebhook(t testing.TB, api *APIServer, checker *webhook.Checker) *Webhook {
	t.Helper()
	w, err := ServeWebhook(api.Clientset, checker, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return w
}

// ServeWebhook is StartWebhook for programs that are not tests (the admission benchmark): it serves from
// dir and registers with the API server behind cs. Call Stop when done.
func ServeWebhook(cs kubernetes.Interface, checker *webhook.Checker, dir string) (*Webhook, error) {
	caPEM, err := WriteServingCert(dir)
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	m, err := webhook.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		return nil, err
	}
	handlers := webhook.Handlers(scheme, checker, m)
	w := &Webhook{URL: "https://127.0.0.1:" + strconv.Itoa(port), Metrics: m}
	w.serve = func() error {
		srv := crwebhook.NewServer(crwebhook.Options{Host: "127.0.0.1", Port: port, CertDir: dir})
		for path, h := range handlers {
			srv.Register(path, h)
		}
		ctx, cancel := context.WithCancel(context.Background())
		w.cancel, w.done = cancel, make(chan struct{})
		go func(done chan struct{}) {
			defer close(done)
			_ = srv.Start(ctx)
		}(w.done)
		deadline := time.Now().Add(10 * time.Second)
		for {
			c, err := tls.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // readiness probe only
			if err == nil {
				c.Close()
				return nil
			}
			if time.Now().After(deadline) {
				w.Stop()
				return fmt.Errorf("webhook server did not listen on %d: %w", port, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if err := w.serve(); err != nil {
		return nil, err
	}

	sandboxNS := "agent-sandbox"
	if p := checker.Policy(); p != nil {
		sandboxNS = p.Spec.Sandbox.Namespace
	}
	mut, val := webhook.Configurations(webhook.ConfigurationsFor{Name: "agent-sandbox-test", ServiceNamespace: "unused", ServiceName: "unused", Port: 443,
		SandboxNamespace: sandboxNS})
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
	ar := cs.AdmissionregistrationV1()
	if _, err := ar.MutatingWebhookConfigurations().Create(context.Background(), mut, metav1.CreateOptions{}); err != nil {
		w.Stop()
		return nil, fmt.Errorf("register mutating webhook: %w", err)
	}
	if _, err := ar.ValidatingWebhookConfigurations().Create(context.Background(), val, metav1.CreateOptions{}); err != nil {
		w.Stop()
		return nil, fmt.Errorf("register validating webhook: %w", err)
	}
	return w, nil
}

// Stop shuts the webhook server down; the registrations stay, so the API server now fails closed.
func (w *Webhook) Stop() {
	w.cancel()
	<-w.done
}

// Restart serves the stopped webhook again, as a restarted webhook Pod would: the same address,
// certificate, checker and ledger.
func (w *Webhook) Restart(t testing.TB) {
	t.Helper()
	if err := w.serve(); err != nil {
		t.Fatal(err)
	}
}

// WriteServingCert writes tls.crt and tls.key for 127.0.0.1, signed by a throwaway CA, into dir and
// returns the CA in PEM.
func WriteServingCert(dir string) ([]byte, error) {
	ca, err := certs.Issue(certs.Spec{Serial: big.NewInt(1), CommonName: "harness-webhook-ca",
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), CA: true,
		KeyUsage: x509.KeyUsageCertSign}, nil)
	if err != nil {
		return nil, err
	}
	leaf, err := certs.Issue(certs.Spec{Serial: big.NewInt(2), CommonName: "127.0.0.1",
		IPs: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, ca)
	if err != nil {
		return nil, err
	}
	keyPEM, err := leaf.KeyPEM()
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), leaf.CertPEM(), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), keyPEM, 0o600); err != nil {
		return nil, err
	}
	return ca.CertPEM(), nil
}
