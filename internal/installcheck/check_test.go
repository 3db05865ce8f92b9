package installcheck

import (
	"bytes"
	"context"
	"errors"
	batchv1 "k8s.io/api/batch/v1"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

var names = []string{"jobs.mutate.agent-sandbox.dev", "jobs.validate.agent-sandbox.dev"}

// jobsAnswering is a fake Jobs client whose create answers with err (nil: the Job is admitted), and
// records whether the create was a dry run.
func jobsAnswering(t *testing.T, err error) (JobCreator, *bool) {
	t.Helper()
	cs := fake.NewClientset()
	dryRun := new(bool)
	cs.PrependReactor("create", "jobs", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ca := a.(k8stesting.CreateActionImpl)
		*dryRun = len(ca.CreateOptions.DryRun) == 1 && ca.CreateOptions.DryRun[0] == metav1.DryRunAll
		if err != nil {
			return true, nil, err
		}
		return true, ca.Object, nil
	})
	return cs.BatchV1().Jobs("agent-sandbox"), dryRun
}

func TestCheckDeniesUnsafeJob(t *testing.T) {
	gr := schema.GroupResource{Group: "batch", Resource: "jobs"}
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"denied by the webhook", apierrors.NewForbidden(gr, "x", errors.New(`admission webhook "jobs.validate.agent-sandbox.dev" denied the request: not a policy tool`)), nil},
		{"admitted", nil, ErrAdmitted},
		{"RBAC", apierrors.NewForbidden(gr, "x", errors.New(`User "system:serviceaccount:a:b" cannot create resource "jobs"`)), ErrNotByWebhook},
		{"another webhook", apierrors.NewForbidden(gr, "x", errors.New(`admission webhook "policy.example.com" denied the request: no`)), ErrNotByWebhook},
		{"unreachable", apierrors.NewInternalError(errors.New(`Internal error occurred: failed calling webhook "jobs.validate.agent-sandbox.dev": tls: failed to verify certificate`)), ErrUnreachable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			jobs, dryRun := jobsAnswering(t, tc.err)
			msg, err := CheckDeniesUnsafeJob(context.Background(), jobs, "agent-sandbox", "registry.invalid/x", names)
			if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Errorf("err = %v, want %v", err, tc.want)
			}
			if tc.want == nil && !strings.Contains(msg, "denied the request") {
				t.Errorf("denial = %q", msg)
			}
			if !*dryRun {
				t.Error("the unsafe Job was not submitted as a server-side dry run")
			}
		})
	}
}

// TestUnsafeJob: the Job the check submits breaks the isolation rules, so a working webhook can never
// admit it.
func TestUnsafeJob(t *testing.T) {
	j := UnsafeJob("agent-sandbox", "img")
	ps := j.Spec.Template.Spec
	if !ps.HostNetwork || ps.Containers[0].SecurityContext == nil || !*ps.Containers[0].SecurityContext.Privileged || j.Labels["agent-sandbox.dev/tool"] != "" {
		t.Errorf("UnsafeJob is not unsafe enough: %+v", j)
	}
}

func TestCheckTLS(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	addr := srv.Listener.Addr().String()
	dial := (&net.Dialer{}).DialContext
	ctx := context.Background()
	cert, err := CheckTLS(ctx, dial, addr, "example.com", time.Now())
	if err != nil || cert == nil {
		t.Fatalf("CheckTLS against a server with a certificate for example.com: %v", err)
	}
	if _, err := CheckTLS(ctx, dial, addr, "agent-sandbox-webhook.agent-sandbox-system.svc", time.Now()); err == nil {
		t.Error("a certificate for another name passed")
	}
	if _, err := CheckTLS(ctx, dial, addr, "example.com", cert.NotAfter.Add(time.Hour)); err == nil {
		t.Error("an expired certificate passed")
	}
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	go func() {
		c, err := l.Accept()
		if err == nil {
			c.Write([]byte("HTTP/1.1 200 OK\r\n\r\nplain"))
			c.Close()
		}
	}()
	defer l.Close()
	if _, err := CheckTLS(ctx, dial, l.Addr().String(), "example.com", time.Now()); err == nil {
		t.Error("a plain-text server passed")
	}
}

// TestRun: the report names both checks; a failing one makes Run fail, after its retries, within the timeout.
func TestRun(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	dialSrv := func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, srv.Listener.Addr().String())
	}
	gr := schema.GroupResource{Group: "batch", Resource: "jobs"}
	denied, _ := jobsAnswering(t, apierrors.NewForbidden(gr, "x", errors.New(`admission webhook "jobs.validate.agent-sandbox.dev" denied the request: no`)))
	var out bytes.Buffer
	// httptest's certificate is for example.com: name the "Service" so that its DNS name matches.
	o := Options{Service: "example", Namespace: "com", Port: 443, SandboxNamespace: "agent-sandbox", Jobs: denied, WebhookNames: names,
		Timeout: 5 * time.Second, Dial: dialSrv, Out: &out}
	// The certificate is for example.com, not example.com.svc.
	err := Run(context.Background(), o)
	if err == nil || !strings.Contains(out.String(), "FAIL webhook Service example.com.svc:443 answers TLS") || !strings.Contains(out.String(), "ok   an unsafe Job") {
		t.Errorf("Run = %v\n%s", err, out.String())
	}

}

// TestRetry: a failing check is retried until the deadline, an admitted Job is not (waiting cannot change it).
func TestRetry(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	calls := 0
	if err := retry(ctx, func() error { calls++; return ErrAdmitted }); !errors.Is(err, ErrAdmitted) || calls != 1 {
		t.Errorf("admitted: %v after %d calls, want ErrAdmitted after 1", err, calls)
	}
	calls = 0
	if err := retry(ctx, func() error { calls++; return ErrUnreachable }); !errors.Is(err, ErrUnreachable) || calls < 2 {
		t.Errorf("unreachable: %v after %d calls, want retries", err, calls)
	}
	calls = 0
	if err := retry(context.Background(), func() error {
		calls++
		if calls < 2 {
			return ErrUnreachable
		}
		return nil
	}); err != nil || calls != 2 {
		t.Errorf("a check that passes on the second try: %v after %d calls", err, calls)
	}
}

// slowDenier refuses as the webhook does, but only after it failed to call it for a while (the webhook
// is still starting).
type slowDenier struct{ until time.Time }

func (s slowDenier) Create(context.Context, *batchv1.Job, metav1.CreateOptions) (*batchv1.Job, error) {
	gr := schema.GroupResource{Group: "batch", Resource: "jobs"}
	if time.Now().Before(s.until) {
		return nil, apierrors.NewInternalError(errors.New(`failed calling webhook "jobs.validate.agent-sandbox.dev": connection refused`))
	}
	return nil, apierrors.NewForbidden(gr, "x", errors.New(`admission webhook "jobs.validate.agent-sandbox.dev" denied the request: no`))
}

// TestRunEndpoints: with endpoints listed, each one is dialled (no cluster DNS needed) and named in the
// report; a TLS check that never passes does not use up the Job check's time (each check has the whole
// timeout).
func TestRunEndpoints(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	var dialled []string
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		dialled = append(dialled, addr)
		return (&net.Dialer{}).DialContext(ctx, network, srv.Listener.Addr().String())
	}
	var out bytes.Buffer
	// Checks are retried every 2 s. The TLS check fails for its whole timeout (3 s: tries at 0 and 2 s); the
	// webhook refuses the Job only from a second after that, so the Job check, which starts when the TLS
	// check gives up, fails its first try (at 3 s) and passes its second (at 5 s) only if it has a timeout of
	// its own. (With 2 s, the Job check's second try and its deadline fell due together, and which came first
	// was up to the scheduler: the test failed now and then under load.)
	timeout := 3 * time.Second
	o := Options{Service: "agent-sandbox-webhook", Namespace: "agent-sandbox-system", Port: 443, SandboxNamespace: "agent-sandbox",
		Jobs: slowDenier{until: time.Now().Add(timeout + time.Second)}, WebhookNames: names, Timeout: timeout, Dial: dial, Out: &out,
		Endpoints: func(context.Context) ([]string, error) { return []string{"10.0.0.1:9443", "10.0.0.2:9443"}, nil }}
	err := Run(context.Background(), o)
	// httptest's certificate is not for agent-sandbox-webhook.agent-sandbox-system.svc: the TLS check fails.
	if err == nil || !strings.Contains(out.String(), "FAIL webhook Service agent-sandbox-webhook.agent-sandbox-system.svc (each ready endpoint) answers TLS: 10.0.0.1:9443:") {
		t.Errorf("Run = %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "ok   an unsafe Job") {
		t.Errorf("the Job check ran out of time behind the failing TLS check:\n%s", out.String())
	}
	if len(dialled) == 0 || dialled[0] != "10.0.0.1:9443" {
		t.Errorf("dialled %v, want the endpoints", dialled)
	}

	// Endpoints that cannot be listed: a note, and the DNS name is dialled.
	out.Reset()
	dialled = nil
	o.Jobs = slowDenier{}
	o.Endpoints = func(context.Context) ([]string, error) { return nil, errors.New("forbidden") }
	_ = Run(context.Background(), o)
	if !strings.Contains(out.String(), "note the webhook's endpoints cannot be listed (forbidden)") || len(dialled) == 0 || dialled[0] != "agent-sandbox-webhook.agent-sandbox-system.svc:443" {
		t.Errorf("dialled %v\n%s", dialled, out.String())
	}
}
