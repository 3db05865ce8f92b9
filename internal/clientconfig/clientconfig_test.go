package clientconfig

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

const testToken = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJtY3AifQ.c2lnbmF0dXJl"

func TestDir(t *testing.T) {
	for _, tt := range []struct {
		env  map[string]string
		want string
		err  bool
	}{
		{map[string]string{"HOME": "/home/ada"}, "/home/ada/.config/agent-sandbox", false},
		{map[string]string{"HOME": "/home/ada", "XDG_CONFIG_HOME": "/xdg"}, "/xdg/agent-sandbox", false},
		// A relative XDG_CONFIG_HOME is invalid by the XDG rules and ignored.
		{map[string]string{"HOME": "/home/ada", "XDG_CONFIG_HOME": "rel"}, "/home/ada/.config/agent-sandbox", false},
		{map[string]string{}, "", true},
	} {
		got, err := Dir(func(k string) string { return tt.env[k] })
		if got != tt.want || (err != nil) != tt.err {
			t.Errorf("Dir(%v) = %q, %v; want %q (error: %v)", tt.env, got, err, tt.want, tt.err)
		}
	}
}

// TestRenderKubeconfig: the rendered kubeconfig holds the server, the CA, the TLS server name, the token
// and the sandbox namespace, and nothing else: exactly one cluster, user and context, and a user entry
// with no field but the token (no client certificate, exec plugin, auth provider, basic auth or
// impersonation, whatever the operator's own kubeconfig used).
func TestRenderKubeconfig(t *testing.T) {
	ca := []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
	out, err := RenderKubeconfig(Cluster{Server: "https://192.0.2.7:6443", CAData: ca, TLSServerName: "kubernetes"},
		Credential{Namespace: "agent-sandbox", ServiceAccount: "agent-sandbox-mcp", Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load(out)
	if err != nil {
		t.Fatalf("the rendered kubeconfig does not load: %v\n%s", err, out)
	}
	if len(cfg.Clusters) != 1 || len(cfg.AuthInfos) != 1 || len(cfg.Contexts) != 1 {
		t.Fatalf("want one cluster, user and context:\n%s", out)
	}
	ctx := cfg.Contexts[cfg.CurrentContext]
	if ctx == nil || ctx.Namespace != "agent-sandbox" {
		t.Fatalf("current context %q: %+v", cfg.CurrentContext, ctx)
	}
	cl := cfg.Clusters[ctx.Cluster]
	if cl.Server != "https://192.0.2.7:6443" || string(cl.CertificateAuthorityData) != string(ca) || cl.TLSServerName != "kubernetes" ||
		cl.InsecureSkipTLSVerify || cl.CertificateAuthority != "" || cl.ProxyURL != "" {
		t.Errorf("cluster %+v", cl)
	}
	user := cfg.AuthInfos[ctx.AuthInfo]
	want := clientcmdapi.AuthInfo{Token: testToken, LocationOfOrigin: user.LocationOfOrigin, Extensions: user.Extensions}
	if !reflect.DeepEqual(*user, want) {
		t.Errorf("the user entry holds more than the token: %+v", user)
	}
	rc, err := clientcmd.RESTConfigFromKubeConfig(out)
	if err != nil {
		t.Fatal(err)
	}
	if rc.BearerToken != testToken || rc.Host != "https://192.0.2.7:6443" || rc.TLSClientConfig.ServerName != "kubernetes" {
		t.Errorf("rest config: host %s server name %s", rc.Host, rc.TLSClientConfig.ServerName)
	}
}

func TestRenderKubeconfigRefuses(t *testing.T) {
	good := Credential{Namespace: "agent-sandbox", Token: testToken}
	for _, tt := range []struct {
		name string
		c    Cluster
		cred Credential
		want string
	}{
		{"plain http", Cluster{Server: "http://192.0.2.7:8080"}, good, "not an https URL"},
		{"no server", Cluster{}, good, "not an https URL"},
		{"no token", Cluster{Server: "https://a"}, Credential{Namespace: "n"}, "token is empty"},
		{"token with a newline", Cluster{Server: "https://a"}, Credential{Namespace: "n", Token: "a\nb"}, "not one word"},
		{"no namespace", Cluster{Server: "https://a"}, Credential{Token: testToken}, "no sandbox namespace"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, err := RenderKubeconfig(tt.c, tt.cred)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want %q", err, tt.want)
			}
			if out != nil || strings.Contains(err.Error(), testToken) {
				t.Errorf("output %q, error %v", out, err)
			}
		})
	}
}

// TestWriteFile: the file is written whole with mode 0600 (whatever the umask), replaces an older one,
// leaves no temporary file behind, and the folders it needs are made with mode 0700.
func TestWriteFile(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := t.TempDir()
	path := filepath.Join(dir, "home", ".config", "agent-sandbox", "mcp.kubeconfig")
	for _, content := range []string{"first", "second"} {
		if err := WriteFile(path, []byte(content), KubeconfigMode, nil); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != content {
			t.Fatalf("read %q, %v; want %q", got, err, content)
		}
		fi, _ := os.Stat(path)
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("mode %v, want 0600", fi.Mode().Perm())
		}
	}
	for _, d := range []string{"home", "home/.config", "home/.config/agent-sandbox"} {
		fi, err := os.Stat(filepath.Join(dir, d))
		if err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v %v, want a 0700 folder", d, fi.Mode(), err)
		}
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("left behind: %v", entries)
	}
}

// TestWriteFileRefusesASymlinkedFolder: root writing into another user's home is not steered elsewhere by
// a link that user planted where the folder should be.
func TestWriteFileRefusesASymlinkedFolder(t *testing.T) {
	dir := t.TempDir()
	elsewhere := filepath.Join(dir, "elsewhere")
	if err := os.Mkdir(elsewhere, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "agent-sandbox")
	if err := os.Symlink(elsewhere, link); err != nil {
		t.Fatal(err)
	}
	err := WriteFile(filepath.Join(link, "mcp.kubeconfig"), []byte("x"), KubeconfigMode, nil)
	if err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("err %v, want a refusal naming the symbolic link", err)
	}
	if entries, _ := os.ReadDir(elsewhere); len(entries) != 0 {
		t.Errorf("wrote through the link: %v", entries)
	}
}

// TestWriteFileOwner: with an owner, the file and the folders made for it belong to that owner. Giving a
// file away needs root; as another user the test writes for itself.
func TestWriteFileOwner(t *testing.T) {
	owner := &Owner{UID: os.Getuid(), GID: os.Getgid()}
	if os.Geteuid() == 0 {
		owner = &Owner{UID: 4242, GID: 4343}
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "made", "mcp.kubeconfig")
	if err := WriteFile(path, []byte("x"), KubeconfigMode, owner); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, filepath.Dir(path)} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if int(st.Uid) != owner.UID || int(st.Gid) != owner.GID {
			t.Errorf("%s belongs to %d:%d, want %d:%d", p, st.Uid, st.Gid, owner.UID, owner.GID)
		}
	}
	// The folder that existed before (the test's own) keeps its owner.
	fi, _ := os.Stat(dir)
	if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != os.Getuid() {
		t.Errorf("an existing folder was given away: uid %d", st.Uid)
	}
}
