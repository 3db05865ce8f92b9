// Package installcheck checks an installed agent-sandbox from inside the cluster. It is what the chart's
// `helm test` Pod runs (agent-sandbox check-install): the webhook Service answers TLS for its name, and the
// API server, through the webhook, refuses an unsafe Job in the sandbox namespace.
package installcheck

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

var (
	// ErrAdmitted: the API server accepted an unsafe Job in the sandbox namespace. The webhook is not
	// guarding the namespace (its configuration does not select it, or it is not registered at all).
	ErrAdmitted = errors.New("the API server admitted an unsafe Job: the webhook does not guard the namespace (does it carry the label agent-sandbox.dev/sandbox=true? are the webhook configurations registered?)")
	// ErrNotByWebhook: the Job was refused, but not by the webhook (RBAC, a quota, another admission
	// plugin), so the refusal proves nothing about the webhook.
	ErrNotByWebhook = errors.New("the Job was refused, but not by the agent-sandbox webhook")
	// ErrUnreachable: the API server could not call the webhook (no ready endpoints, a caBundle that does
	// not match the serving certificate, a network policy). Sandbox Jobs fail closed then, but nothing
	// runs either.
	ErrUnreachable = errors.New("the API server cannot call the webhook")
)

// JobCreator creates Jobs in one namespace: the typed client's JobInterface has this method.
type JobCreator interface {
	Create(ctx context.Context, job *batchv1.Job, opts metav1.CreateOptions) (*batchv1.Job, error)
}

// DialFunc opens a network connection (net.Dialer.DialContext).
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// Options say what to check.
type Options struct {
	// Service and Namespace name the webhook's Service; Port is its HTTPS port (443).
	Service, Namespace string
	Port               int
	// SandboxNamespace is where the unsafe Job is submitted, Jobs the client for it.
	SandboxNamespace string
	Jobs             JobCreator
	// WebhookNames are the admission webhooks whose denial counts (webhook.Configurations' names).
	WebhookNames []string
	// Image is the unsafe Job's image; a dry run never pulls it.
	Image string
	// Timeout bounds the retries: right after an install the webhook may still be starting.
	Timeout time.Duration
	// Endpoints, when set, lists the Service's ready endpoints as host:port. Each one is checked for TLS
	// directly (every replica, and no cluster DNS needed); without it, or when it lists none, the
	// Service's DNS name is dialled.
	Endpoints func(ctx context.Context) ([]string, error)
	Dial      DialFunc
	Now       func() time.Time
	Out       io.Writer
	// Live, when set, reads the registered webhook configurations, which must guard all that Want (what
	// agent-sandbox renders) does: CheckConfigurations.
	Live  func(ctx context.Context) (*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration, error)
	WantM *admissionregistrationv1.MutatingWebhookConfiguration
	WantV *admissionregistrationv1.ValidatingWebhookConfiguration
	// Guard, when set, reads the admission policy and binding that keep the webhook's ServiceAccount to
	// injecting caBundle (self-managed TLS): CheckGuard.
	Guard func(ctx context.Context) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding, error)
}

// Run runs every check, retrying each until it passes or the timeout passes, and prints one line per
// check. It returns the failures, joined.
func Run(ctx context.Context, o Options) error {
	if o.Dial == nil {
		o.Dial = (&net.Dialer{Timeout: 5 * time.Second}).DialContext
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	host := fmt.Sprintf("%s.%s.svc", o.Service, o.Namespace)
	var errs []error
	report := func(what string, detail string, err error) {
		if err != nil {
			fmt.Fprintf(o.Out, "FAIL %s: %v\n", what, err)
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
			return
		}
		fmt.Fprintf(o.Out, "ok   %s: %s\n", what, detail)
	}
	// Each check has the whole timeout to itself: one that never passes does not starve the next.
	within := func(f func(ctx context.Context) error) error {
		cctx, cancel := context.WithTimeout(ctx, o.Timeout)
		defer cancel()
		return retry(cctx, func() error { return f(cctx) })
	}

	// The endpoints are waited for while the webhook starts; a listing that fails (no right to list them,
	// say) falls back to the DNS name at once, with a note.
	var addrs []string
	var listErr error
	_ = within(func(ctx context.Context) error {
		if o.Endpoints == nil {
			return nil
		}
		addrs, listErr = o.Endpoints(ctx)
		if listErr == nil && len(addrs) == 0 {
			return errors.New("no ready endpoints yet")
		}
		return nil
	})
	target := "webhook Service " + host + " (each ready endpoint)"
	if len(addrs) == 0 {
		if listErr != nil {
			fmt.Fprintf(o.Out, "note the webhook's endpoints cannot be listed (%v); dialling the Service's DNS name\n", listErr)
		}
		addrs = []string{net.JoinHostPort(host, fmt.Sprint(o.Port))}
		target = "webhook Service " + addrs[0]
	}
	var details []string
	err := within(func(ctx context.Context) error {
		details = details[:0]
		for _, addr := range addrs {
			cert, err := CheckTLS(ctx, o.Dial, addr, host, o.Now())
			if err != nil {
				return fmt.Errorf("%s: %w", addr, err)
			}
			details = append(details, fmt.Sprintf("%s: certificate for %s, valid until %s", addr, host, cert.NotAfter.UTC().Format(time.RFC3339)))
		}
		return nil
	})
	report(target+" answers TLS", strings.Join(details, "; "), err)

	var denial string
	err = within(func(ctx context.Context) (err error) {
		denial, err = CheckDeniesUnsafeJob(ctx, o.Jobs, o.SandboxNamespace, o.Image, o.WebhookNames)
		return err
	})
	report("an unsafe Job in namespace "+o.SandboxNamespace+" is refused by the webhook (server-side dry run)", denial, err)

	if o.Live != nil {
		err = within(func(ctx context.Context) error {
			m, v, err := o.Live(ctx)
			if err != nil {
				return fmt.Errorf("read them: %w", err)
			}
			return CheckConfigurations(m, v, o.WantM, o.WantV)
		})
		report("the registered webhook configurations guard all that agent-sandbox's do", fmt.Sprintf("%d mutating and %d validating webhooks as rendered, failing closed",
			len(o.WantM.Webhooks), len(o.WantV.Webhooks)), err)
	}
	if o.Guard != nil {
		var name string
		err = within(func(ctx context.Context) error {
			p, b, err := o.Guard(ctx)
			if err != nil {
				return fmt.Errorf("read it: %w", err)
			}
			name = p.Name
			return CheckGuard(p, b)
		})
		report("the admission policy that keeps the webhook's ServiceAccount to injecting its CA is in force", name+": fails closed, bound, denies", err)
	}
	return errors.Join(errs...)
}

// retry calls f every two seconds until it succeeds or ctx ends, and returns its last error. A Job that
// was admitted, or configurations that guard less, are not retried: those answers will not change by waiting.
func retry(ctx context.Context, f func() error) error {
	for {
		err := f()
		if err == nil || errors.Is(err, ErrAdmitted) || errors.Is(err, ErrDrifted) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(2 * time.Second):
		}
	}
}

// CheckTLS connects to addr and checks that it serves a certificate for serverName that is valid now. It
// does not check who issued it: the test Pod does not have the CA. The API server's trust in it (the
// caBundle) is what CheckDeniesUnsafeJob proves, since the API server calls the webhook over this TLS.
func CheckTLS(ctx context.Context, dial DialFunc, addr, serverName string, now time.Time) (*x509.Certificate, error) {
	raw, err := dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer raw.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = raw.SetDeadline(d)
	}
	conn := tls.Client(raw, &tls.Config{ServerName: serverName, InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}) //nolint:gosec // see above
	if err := conn.HandshakeContext(ctx); err != nil {
		return nil, fmt.Errorf("TLS handshake: %w", err)
	}
	certs := conn.ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return nil, errors.New("no certificate")
	}
	leaf := certs[0]
	if err := leaf.VerifyHostname(serverName); err != nil {
		return leaf, err
	}
	if now.Before(leaf.NotBefore) || now.After(leaf.NotAfter) {
		return leaf, fmt.Errorf("the certificate is valid from %s to %s, not now", leaf.NotBefore, leaf.NotAfter)
	}
	return leaf, nil
}

// UnsafeJob is a Job no policy renders: a privileged container on the host network, outside every tool.
func UnsafeJob(namespace, image string) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "agent-sandbox-install-check", Namespace: namespace,
			Labels: map[string]string{"app.kubernetes.io/name": "agent-sandbox-install-check"}},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](0),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				HostNetwork:   true,
				Containers: []corev1.Container{{
					Name: "unsafe", Image: image, Command: []string{"/agent-sandbox", "version"},
					SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
				}},
			}},
		},
	}
}

// CheckDeniesUnsafeJob submits UnsafeJob as a server-side dry run and returns the webhook's denial. Only a
// denial by one of webhookNames passes: an admitted Job, a refusal by anything else, or an error calling
// the webhook fail.
func CheckDeniesUnsafeJob(ctx context.Context, jobs JobCreator, namespace, image string, webhookNames []string) (string, error) {
	_, err := jobs.Create(ctx, UnsafeJob(namespace, image), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err == nil {
		return "", ErrAdmitted
	}
	// The API server names the webhook that refused (or could not be called) only in the Status message,
	// in these fixed phrasings (k8s.io/apiserver/pkg/admission/plugin/webhook/errors): the message is the
	// contract being checked here.
	msg := err.Error()
	for _, name := range webhookNames {
		if strings.Contains(msg, `admission webhook "`+name+`" denied the request`) {
			return msg, nil
		}
		if strings.Contains(msg, `failed calling webhook "`+name+`"`) {
			return "", fmt.Errorf("%w: %v", ErrUnreachable, err)
		}
	}
	return "", fmt.Errorf("%w: %v", ErrNotByWebhook, err)
}
