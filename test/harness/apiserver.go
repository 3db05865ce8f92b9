package harness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// APIServer is a running kube-apiserver (with its etcd) and an admin identity for it.
type APIServer struct {
	// Config is an admin (system:masters) client configuration.
	Config *rest.Config
	// URL is the server's address, https://127.0.0.1:port.
	URL string
	// CAPEM is the CA bundle that signs the serving certificate.
	CAPEM []byte
	// KubeconfigPath is an admin kubeconfig file (mode 0600) in the test's temporary directory.
	KubeconfigPath string
	// Clientset is an admin clientset.
	Clientset kubernetes.Interface
	// Env is the underlying envtest environment, for AddUser and the like.
	Env *envtest.Environment
}

// apiServerOptions collects APIServerOption values.
type apiServerOptions struct {
	controllers []string
	args        map[string]string
}

// APIServerOption changes what StartAPIServer starts.
type APIServerOption func(*apiServerOptions)

// DefaultControllers are the kube-controller-manager controllers WithControllerManager runs when given
// none: the token controller (fills kubernetes.io/service-account-token Secrets) and the publisher of
// the kube-root-ca.crt ConfigMap in every namespace.
var DefaultControllers = []string{"serviceaccount-token", "root-ca-cert-publisher"}

// WithControllerManager also runs kube-controller-manager with the given controllers (default
// DefaultControllers). envtest alone runs no controllers. The binary is found as
// $AGENT_SANDBOX_KUBE_CONTROLLER_MANAGER, else kube-controller-manager in $KUBEBUILDER_ASSETS, else beside
// the file $KUBEBUILDER_ASSETS/kube-apiserver links to.
func WithControllerManager(controllers ...string) APIServerOption {
	return func(o *apiServerOptions) {
		if len(controllers) == 0 {
			controllers = DefaultControllers
		}
		o.controllers = controllers
	}
}

// WithAPIServerArg sets one kube-apiserver flag (name without dashes), for example to enable an
// admission plugin.
func WithAPIServerArg(name, value string) APIServerOption {
	return func(o *apiServerOptions) {
		if o.args == nil {
			o.args = map[string]string{}
		}
		o.args[name] = value
	}
}

// StartAPIServer starts etcd and kube-apiserver from $KUBEBUILDER_ASSETS and stops them when the test
// ends.
func StartAPIServer(t testing.TB, opts ...APIServerOption) *APIServer {
	t.Helper()
	var o apiServerOptions
	for _, opt := range opts {
		opt(&o)
	}
	assets := requireEnv(t, "KUBEBUILDER_ASSETS", "a folder holding kube-apiserver, etcd and kubectl")
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		requireExecutable(t, filepath.Join(assets, bin), "KUBEBUILDER_ASSETS")
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory:    assets,
		ControlPlaneStartTimeout: 90 * time.Second,
		ControlPlaneStopTimeout:  30 * time.Second,
	}
	api := env.ControlPlane.GetAPIServer()
	for k, v := range o.args {
		api.Configure().Set(k, v)
	}
	start := time.Now()
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start kube-apiserver and etcd from %s: %v", assets, err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Logf("stop kube-apiserver: %v", err)
		}
	})
	t.Logf("kube-apiserver ready at %s in %s", cfg.Host, time.Since(start).Round(100*time.Millisecond))

	admin, err := env.AddUser(envtest.User{Name: "harness-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatalf("add admin user: %v", err)
	}
	kc, err := admin.KubeConfig()
	if err != nil {
		t.Fatalf("admin kubeconfig: %v", err)
	}
	dir := t.TempDir()
	kcPath := filepath.Join(dir, "admin.kubeconfig")
	if err := os.WriteFile(kcPath, kc, 0o600); err != nil {
		t.Fatalf("write admin kubeconfig: %v", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("admin clientset: %v", err)
	}
	s := &APIServer{Config: cfg, URL: cfg.Host, CAPEM: cfg.CAData, KubeconfigPath: kcPath, Clientset: cs, Env: env}
	if len(o.controllers) > 0 {
		s.startControllerManager(t, assets, api.CertDir, dir, o.controllers)
	}
	return s
}

// startControllerManager runs kube-controller-manager against the server with the envtest's
// service-account signing key, so that the tokens it writes verify.
func (s *APIServer) startControllerManager(t testing.TB, assets, certDir, dir string, controllers []string) {
	t.Helper()
	bin := os.Getenv("AGENT_SANDBOX_KUBE_CONTROLLER_MANAGER")
	from := "AGENT_SANDBOX_KUBE_CONTROLLER_MANAGER"
	if bin == "" {
		bin, from = filepath.Join(assets, "kube-controller-manager"), "KUBEBUILDER_ASSETS"
		if _, err := os.Stat(bin); err != nil {
			if target, err := filepath.EvalSymlinks(filepath.Join(assets, "kube-apiserver")); err == nil {
				bin, from = filepath.Join(filepath.Dir(target), "kube-controller-manager"), "beside kube-apiserver"
			}
		}
	}
	requireExecutable(t, bin, from)
	caPath := filepath.Join(dir, "apiserver-ca.crt")
	if err := os.WriteFile(caPath, s.CAPEM, 0o600); err != nil {
		t.Fatalf("write CA: %v", err)
	}
	p, err := startProcess("kube-controller-manager", dir, bin, []string{
		"--kubeconfig=" + s.KubeconfigPath,
		"--controllers=" + strings.Join(controllers, ","),
		"--service-account-private-key-file=" + filepath.Join(certDir, "sa-signer.key"),
		"--root-ca-file=" + caPath,
		"--use-service-account-credentials=false",
		"--leader-elect=false",
		"--secure-port=0",
		"--v=1",
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p.dumpOnFailure(t)
	t.Cleanup(func() { p.stop(10 * time.Second) })
	// It has no health endpoint without serving; make sure it did not exit at once on a bad flag.
	time.Sleep(500 * time.Millisecond)
	if p.exited() {
		t.Fatalf("kube-controller-manager exited at start: %v\n%s", p.err, p.tail(30))
	}
}
