package cluster

import (
	"crypto/tls"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/cli"
)

// TestWebhookMetricsOptions: --metrics-secure serves metrics through controller-runtime's secure serving with
// the webhook's own certificate, the API server's authentication and authorization, and HTTP/1.1 only;
// without it, plain HTTP.
func TestWebhookMetricsOptions(t *testing.T) {
	o := &webhookOptions{MetricsAddr: ":8080", CertDir: "/certs"}
	if m := o.metricsOptions(); m.SecureServing || m.FilterProvider != nil || m.BindAddress != ":8080" {
		t.Errorf("plain metrics: %+v", m)
	}
	o.MetricsSecure = true
	m := o.metricsOptions()
	if !m.SecureServing || m.FilterProvider == nil || m.CertDir != "/certs" || len(m.TLSOpts) != 1 {
		t.Fatalf("secure metrics: %+v", m)
	}
	c := &tls.Config{NextProtos: []string{"h2"}}
	m.TLSOpts[0](c)
	if len(c.NextProtos) != 1 || c.NextProtos[0] != "http/1.1" {
		t.Errorf("secure metrics offer %v, want HTTP/1.1 only", c.NextProtos)
	}
}

// TestWebhookRefusesUnknownLogLevel: the webhook refuses an unknown --log-level as a usage error, before it
// touches a cluster.
func TestWebhookRefusesUnknownLogLevel(t *testing.T) {
	if code, _, stderr := testMain.Capture("webhook", "--log-level", "verbose"); code != cli.ExitUsage || !strings.Contains(stderr, `--log-level "verbose": want debug, info, warn or error`) {
		t.Errorf("webhook --log-level verbose: exit %d, stderr %q", code, stderr)
	}
}

// TestWebhookRefusesEveryoneAsAnIdentity: a group or user that stands for everyone, trusted as the chart's
// identity or a controller, would let anybody change the sandbox namespace's guards; the webhook refuses it
// as a usage error, as the chart's schema refuses the same values.
func TestWebhookRefusesEveryoneAsAnIdentity(t *testing.T) {
	for _, args := range [][]string{
		{"--admin-group", "system:authenticated"},
		{"--admin-user", "system:anonymous"},
		{"--job-controller-user", "system:serviceaccounts:agent-sandbox"},
		{"--gc-user", "system:serviceaccounts"},
	} {
		code, _, stderr := testMain.Capture(append([]string{"webhook", "--namespace", "agent-sandbox-system"}, args...)...)
		if code != cli.ExitUsage || !strings.Contains(stderr, "stands for everyone") {
			t.Errorf("webhook %v: exit %d, stderr %q", args, code, stderr)
		}
	}
}
