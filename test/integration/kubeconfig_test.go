//go:build integration

package integration

import (
	"bytes"
	"context"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app"
	"github.com/agent-sandbox/agent-sandbox/test/corpus"
	"github.com/agent-sandbox/agent-sandbox/test/harness"
)

// TestKubeconfigRefresh runs `agent-sandbox kubeconfig refresh` against a real API server holding the
// chart's MCP ServiceAccount, Role and RoleBinding (as rendered by the chart): the TokenRequest is real, and
// the kubeconfig it writes lists Jobs in the sandbox namespace and is refused Secrets there and anything in
// kube-system. The same check runs on the live cluster in test/e2e.
func TestKubeconfigRefresh(t *testing.T) {
	ctx := context.Background()
	api := harness.StartAPIServer(t)
	kube := api.Clientset
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: chartSandboxNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	chartRenderArgs(t).install(t, ctx, newClient(t, api.Config), chartSandboxNS, "agent-sandbox-mcp", "ServiceAccount", "Role", "RoleBinding")

	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "config", "agent-sandbox", "mcp.kubeconfig")
	var stdout, stderr bytes.Buffer
	code := app.Main(ctx, []string{"kubeconfig", "refresh", "--kubeconfig", api.KubeconfigPath, "--policy", "../../policy/policy.yaml",
		"--out", out, "--owner", me.Username, "--duration", "1h"}, strings.NewReader(""), &stdout, &stderr)
	t.Logf("kubeconfig refresh: exit %d\n%s%s", code, stdout.String(), stderr.String())
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	if !strings.HasPrefix(stdout.String(), "wrote "+out+" for "+me.Username+": ServiceAccount agent-sandbox/agent-sandbox-mcp on "+strings.TrimSuffix(api.URL, "/")) ||
		!strings.Contains(stdout.String(), "(in 1h0m0s)") || brokerJWT.MatchString(stdout.String()+stderr.String()) {
		t.Errorf("stdout %q stderr %q", stdout.String(), stderr.String())
	}
	fi, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	data, _ := os.ReadFile(out)
	admin, _ := os.ReadFile(api.KubeconfigPath)
	adminCfg, err := clientcmd.Load(admin)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range adminCfg.AuthInfos {
		for _, secret := range []string{u.Token, string(u.ClientKeyData), string(u.ClientCertificateData)} {
			if secret != "" && strings.Contains(string(data), secret) {
				t.Error("the MCP kubeconfig carries the admin's credential")
			}
		}
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", out)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := corpus.MCPReach(ctx, cs, chartSandboxNS); err != nil {
		t.Error(err)
	}

	// A ServiceAccount the chart did not install is a clear failure that writes nothing.
	stdout.Reset()
	stderr.Reset()
	other := filepath.Join(t.TempDir(), "mcp.kubeconfig")
	code = app.Main(ctx, []string{"kubeconfig", "refresh", "--kubeconfig", api.KubeconfigPath, "--policy", "../../policy/policy.yaml",
		"--out", other, "--owner", me.Username, "--service-account", "nobody-here"}, strings.NewReader(""), &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "request a token for ServiceAccount agent-sandbox/nobody-here (is the Helm chart installed") {
		t.Errorf("missing ServiceAccount: exit %d, stderr %q", code, stderr.String())
	}
	if _, err := os.Stat(other); err == nil {
		t.Error("a failed refresh wrote a file")
	}
}
