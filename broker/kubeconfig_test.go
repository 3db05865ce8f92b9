package broker

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/agent-sandbox/agent-sandbox/internal/atomicfile"
)

const testCAPEM = "-----BEGIN CERTIFICATE-----\nMIIBdummy\n-----END CERTIFICATE-----\n"

func TestRenderKubeconfig(t *testing.T) {
	c := testCredential()
	out, err := RenderKubeconfig("https://192.0.2.2:6443", []byte(testCAPEM), &c)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load(out)
	if err != nil {
		t.Fatalf("the kubeconfig does not load: %v\n%s", err, out)
	}
	ctx := cfg.Contexts[cfg.CurrentContext]
	if ctx == nil || ctx.Namespace != "demo-app" {
		t.Fatalf("current context %q: %+v", cfg.CurrentContext, ctx)
	}
	cl, user := cfg.Clusters[ctx.Cluster], cfg.AuthInfos[ctx.AuthInfo]
	if cl.Server != "https://192.0.2.2:6443" || string(cl.CertificateAuthorityData) != testCAPEM || cl.InsecureSkipTLSVerify {
		t.Errorf("cluster: %+v", cl)
	}
	if user.Token != secretToken {
		t.Error("the kubeconfig does not carry the token")
	}
	rc, err := clientcmd.RESTConfigFromKubeConfig(out)
	if err != nil || rc.BearerToken != secretToken || rc.Host != "https://192.0.2.2:6443" {
		t.Errorf("REST config: %v", err)
	}

	for name, f := range map[string]func() ([]byte, error){
		"no server": func() ([]byte, error) { return RenderKubeconfig("", []byte(testCAPEM), &c) },
		"no CA":     func() ([]byte, error) { return RenderKubeconfig("https://x", nil, &c) },
		"no token":  func() ([]byte, error) { return RenderKubeconfig("https://x", []byte(testCAPEM), &Credential{}) },
	} {
		if _, err := f(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestKubeconfigReady(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "kubeconfig")
	if err := KubeconfigReady(path); err == nil {
		t.Error("missing file is ready")
	}
	if err := os.WriteFile(path, nil, 0o400); err != nil {
		t.Fatal(err)
	}
	if err := KubeconfigReady(path); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("empty file: %v", err)
	}
	if err := KubeconfigReady(dir); err == nil {
		t.Error("a directory is ready")
	}
	if err := atomicfile.Write(path, []byte("apiVersion: v1"), KubeconfigMode); err != nil {
		t.Fatal(err)
	}
	if err := KubeconfigReady(path); err != nil {
		t.Errorf("written file: %v", err)
	}
}
