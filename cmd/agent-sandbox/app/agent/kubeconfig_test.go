package agent

import (
	"bytes"
	"context"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/cli"
)

const (
	refreshTestToken = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6YWdlbnQtc2FuZGJveDphZ2VudC1zYW5kYm94LW1jcCJ9.c2ln"
	// operatorToken and the client certificate stand for the operator's own credentials: they must never
	// reach the MCP kubeconfig.
	operatorToken = "operator-admin-token-never-copy-me"
	testCAPEM     = "-----BEGIN CERTIFICATE-----\nMIIBdGVzdC1jYQ==\n-----END CERTIFICATE-----\n"
)

// refreshFixture is an operator's kubeconfig with a client certificate, a token and a CA file, and the
// options of `kubeconfig refresh` wired to a fake API server that answers TokenRequests.
type refreshFixture struct {
	dir      string
	opts     *kubeconfigRefreshOptions
	out      *bytes.Buffer
	requests []*authenticationv1.TokenRequest
	asked    []string // namespace/name of each TokenRequest
	gotHost  string
}

func newRefreshFixture(t *testing.T, cluster string) *refreshFixture {
	t.Helper()
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, []byte(testCAPEM), 0o600); err != nil {
		t.Fatal(err)
	}
	if cluster == "" {
		cluster = `{server: "https://192.0.2.7:6443", certificate-authority: ` + ca + `, tls-server-name: kubernetes.default}`
	}
	kc := filepath.Join(dir, "admin.kubeconfig")
	if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: local, cluster: `+cluster+`}]
users: [{name: admin, user: {token: `+operatorToken+`, client-certificate-data: Q0VSVA==, client-key-data: S0VZ}}]
contexts: [{name: admin, context: {cluster: local, user: admin, namespace: kube-system}}]
current-context: admin
`), 0o600); err != nil {
		t.Fatal(err)
	}
	f := &refreshFixture{dir: dir, out: &bytes.Buffer{}}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	env := map[string]string{"HOME": filepath.Join(dir, "home")}
	f.opts = &kubeconfigRefreshOptions{
		Kubeconfig: kc, PolicyFile: "../../../../policy/policy.yaml", Duration: defaultMCPTokenDuration, ServiceAccount: defaultMCPServiceAccount,
		streams: cli.IO{Out: f.out, ErrOut: &bytes.Buffer{}},
		paths:   clientPaths{getenv: func(k string) string { return env[k] }, stat: os.Stat},
		geteuid: func() int { return 1000 },
		now:     func() time.Time { return now },
		newClient: func(c *rest.Config) (kubernetes.Interface, error) {
			f.gotHost = c.Host
			cs := fake.NewClientset()
			cs.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
				ca := a.(k8stesting.CreateActionImpl)
				tr := ca.GetObject().(*authenticationv1.TokenRequest)
				f.requests = append(f.requests, tr)
				f.asked = append(f.asked, ca.GetNamespace()+"/"+ca.Name+"/"+ca.GetSubresource())
				exp := now.Add(time.Duration(*tr.Spec.ExpirationSeconds) * time.Second)
				return true, &authenticationv1.TokenRequest{Status: authenticationv1.TokenRequestStatus{Token: refreshTestToken, ExpirationTimestamp: metav1.NewTime(exp)}}, nil
			})
			return cs, nil
		},
	}
	return f
}

func (f *refreshFixture) run(t *testing.T) error {
	t.Helper()
	if err := f.opts.Complete(); err != nil {
		return err
	}
	if err := f.opts.Validate(); err != nil {
		return err
	}
	return f.opts.Run(context.Background())
}

// TestKubeconfigRefresh: one TokenRequest for the chart's MCP ServiceAccount in the policy's sandbox
// namespace, for the duration asked; the file lands in ~/.config/agent-sandbox with mode 0600 and holds
// the operator's server, CA and TLS server name, the new token and the sandbox namespace, and none of the
// operator's own credentials; the expiry is printed.
func TestKubeconfigRefresh(t *testing.T) {
	f := newRefreshFixture(t, "")
	f.opts.Duration = 8 * time.Hour
	if err := f.run(t); err != nil {
		t.Fatal(err)
	}
	if len(f.requests) != 1 || f.asked[0] != "agent-sandbox/agent-sandbox-mcp/token" || *f.requests[0].Spec.ExpirationSeconds != 8*3600 {
		t.Fatalf("token requests %v %+v", f.asked, f.requests)
	}
	if len(f.requests[0].Spec.Audiences) != 0 || f.requests[0].Spec.BoundObjectRef != nil {
		t.Errorf("the token is for the API server's default audience and bound to nothing: %+v", f.requests[0].Spec)
	}
	if f.gotHost != "https://192.0.2.7:6443" {
		t.Errorf("TokenRequest sent to %q", f.gotHost)
	}
	want := filepath.Join(f.dir, "home", ".config", "agent-sandbox", "mcp.kubeconfig")
	if f.opts.Out != want {
		t.Errorf("out %s, want %s", f.opts.Out, want)
	}
	data, err := os.ReadFile(want)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(want)
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	for _, secret := range []string{operatorToken, "Q0VSVA==", "S0VZ", "client-certificate", "client-key", "exec", "kube-system"} {
		if strings.Contains(string(data), secret) {
			t.Errorf("the MCP kubeconfig contains %q:\n%s", secret, data)
		}
	}
	cfg, err := clientcmd.Load(data)
	if err != nil {
		t.Fatal(err)
	}
	ctx := cfg.Contexts[cfg.CurrentContext]
	cl, u := cfg.Clusters[ctx.Cluster], cfg.AuthInfos[ctx.AuthInfo]
	if ctx.Namespace != "agent-sandbox" || cl.Server != "https://192.0.2.7:6443" || string(cl.CertificateAuthorityData) != testCAPEM ||
		cl.TLSServerName != "kubernetes.default" || u.Token != refreshTestToken {
		t.Errorf("kubeconfig:\n%s", data)
	}
	wantOut := "wrote " + want + ": ServiceAccount agent-sandbox/agent-sandbox-mcp on https://192.0.2.7:6443, sandbox namespace only\n" +
		"the token expires 2026-11-30T20:00:00Z (in 8h0m0s); run `agent-sandbox kubeconfig refresh` again before then and restart your MCP client\n"
	if f.out.String() != wantOut {
		t.Errorf("stdout\n%s\nwant\n%s", f.out, wantOut)
	}
	if strings.Contains(f.out.String(), refreshTestToken) {
		t.Error("the token was printed")
	}

	// Refreshing replaces the file in place.
	f.out.Reset()
	if err := f.opts.Run(context.Background()); err != nil || len(f.requests) != 2 {
		t.Fatalf("second refresh: %v", err)
	}
}

func TestKubeconfigRefreshRefuses(t *testing.T) {
	for _, tt := range []struct {
		name    string
		cluster string
		mutate  func(o *kubeconfigRefreshOptions)
		want    string
	}{
		{"insecure cluster", `{server: "https://192.0.2.7:6443", insecure-skip-tls-verify: true}`, nil, "skips TLS verification"},
		{"plain http", `{server: "http://192.0.2.7:8080"}`, nil, "not an https URL"},
		{"too short", "", func(o *kubeconfigRefreshOptions) { o.Duration = 5 * time.Minute }, "--duration 5m0s: must be between 10m0s and 168h0m0s"},
		{"too long", "", func(o *kubeconfigRefreshOptions) { o.Duration = 8 * 24 * time.Hour }, "must be between"},
		{"another owner without root", "", func(o *kubeconfigRefreshOptions) {
			o.Owner = "root"
		}, "only root can write a file for another user"},
		{"unknown owner", "", func(o *kubeconfigRefreshOptions) { o.Owner = "no-such-user-agent-sandbox" }, "--owner no-such-user-agent-sandbox"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newRefreshFixture(t, tt.cluster)
			if tt.mutate != nil {
				tt.mutate(f.opts)
			}
			err := f.run(t)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want %q", err, tt.want)
			}
			if strings.Contains(err.Error(), refreshTestToken) || strings.Contains(err.Error(), operatorToken) {
				t.Errorf("a token in the error: %v", err)
			}
			if _, err := os.Stat(filepath.Join(f.dir, "home")); err == nil {
				t.Error("something was written")
			}
		})
	}
}

// TestKubeconfigRefreshForTheSudoUser: as root through sudo, the file goes to the invoking user's
// ~/.config/agent-sandbox and belongs to them, folders included; an explicit --out and --owner are
// honoured. Giving files away needs root, so the writing part runs only as root.
func TestKubeconfigRefreshForTheSudoUser(t *testing.T) {
	home := t.TempDir()
	ada := &user.User{Username: "ada", Uid: "4242", Gid: "4343", HomeDir: home}
	f := newRefreshFixture(t, "")
	env := map[string]string{"HOME": "/root", "SUDO_USER": "ada"}
	f.opts.paths.getenv = func(k string) string { return env[k] }
	f.opts.geteuid = func() int { return 0 }
	f.opts.lookupUser = func(name string) (*user.User, error) {
		if name != "ada" {
			t.Fatalf("looked up %q", name)
		}
		return ada, nil
	}
	if err := f.opts.Complete(); err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(home, ".config", "agent-sandbox", "mcp.kubeconfig")
	if f.opts.Owner != "ada" || f.opts.Out != want || f.opts.owner == nil || f.opts.owner.UID != 4242 || f.opts.owner.GID != 4343 {
		t.Fatalf("owner %q %+v, out %s", f.opts.Owner, f.opts.owner, f.opts.Out)
	}
	if err := f.opts.Validate(); err != nil {
		t.Fatal(err)
	}
	// Not root through sudo: SUDO_USER alone changes nothing.
	g := newRefreshFixture(t, "")
	g.opts.paths.getenv = func(k string) string { return map[string]string{"HOME": "/home/me", "SUDO_USER": "ada"}[k] }
	if err := g.opts.Complete(); err != nil || g.opts.owner != nil || g.opts.Out != "/home/me/.config/agent-sandbox/mcp.kubeconfig" {
		t.Errorf("without root: %v owner %+v out %s", err, g.opts.owner, g.opts.Out)
	}

	if os.Geteuid() != 0 {
		t.Skip("giving a file to another user needs root")
	}
	if err := f.opts.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{want, filepath.Dir(want), filepath.Dir(filepath.Dir(want))} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if strconv.Itoa(int(st.Uid)) != ada.Uid || strconv.Itoa(int(st.Gid)) != ada.Gid {
			t.Errorf("%s belongs to %d:%d, want ada (4242:4343)", p, st.Uid, st.Gid)
		}
	}
	if !strings.HasPrefix(f.out.String(), "wrote "+want+" for ada: ") {
		t.Errorf("stdout %q", f.out)
	}
}
