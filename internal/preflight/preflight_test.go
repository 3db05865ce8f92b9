package preflight

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestVaultAddress(t *testing.T) {
	cases := []struct {
		addr, cidr         string
		wantHost, wantCIDR string
		wantPort           int
		err                string
	}{
		{addr: "http://10.244.0.1:8200", wantHost: "10.244.0.1:8200", wantCIDR: "10.244.0.1/32", wantPort: 8200},
		{addr: "https://10.0.0.5", wantHost: "10.0.0.5:443", wantCIDR: "10.0.0.5/32", wantPort: 443},
		{addr: "http://[fd00::5]:8200", wantHost: "[fd00::5]:8200", wantCIDR: "fd00::5/128", wantPort: 8200},
		{addr: "https://vault.internal:8200", cidr: "10.10.0.0/28", wantHost: "vault.internal:8200", wantCIDR: "10.10.0.0/28", wantPort: 8200},
		{addr: "https://vault.internal:8200", err: "give --vault-cidr"},
		{addr: "10.0.0.5:8200", err: "is not a URL"},
		{addr: "http://10.0.0.5:port", err: "is not a URL"},
	}
	for _, c := range cases {
		r := &run{Options: Options{VaultAddr: c.addr, VaultCIDR: c.cidr}}
		host, cidr, port, err := r.vault()
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: err %v, want %q", c.addr, err, c.err)
			}
			continue
		}
		if err != nil || host != c.wantHost || cidr != c.wantCIDR || port != c.wantPort {
			t.Errorf("%s: got %s %s %d %v", c.addr, host, cidr, port, err)
		}
	}
}

// TestConnect runs the probe's connect against a real listener and a closed port.
func TestConnect(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	closedAddr := closed.Addr().String()
	closed.Close()
	rep := Connect(context.Background(), []string{ln.Addr().String(), closedAddr, "dns:localhost"}, time.Second)
	if len(rep.Targets) != 3 || !rep.Targets[0].Connected || rep.Targets[1].Connected || rep.Targets[1].Error == "" || !rep.Targets[2].Connected {
		t.Fatalf("report %+v", rep)
	}
}

func TestKernelOnHostIsNotGVisor(t *testing.T) {
	k := Kernel()
	if k.Version == "" {
		t.Skip("no /proc/version")
	}
	if k.GVisor && !strings.Contains(strings.ToLower(k.Version+k.Log), "gvisor") {
		t.Fatalf("a kernel that does not name gVisor was taken for it: %+v", k)
	}
}

// TestServeWebhook: the probe webhook answers an AdmissionReview over TLS with a denial carrying the
// marker, which is how the orchestrator tells that the API server reached it.
func TestServeWebhook(t *testing.T) {
	ca, cert, key, err := selfSigned("localhost")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cf, kf := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	os.WriteFile(cf, cert, 0o600)
	os.WriteFile(kf, key, 0o600)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go ServeWebhook(ctx, addr, cf, kf)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost"}}, Timeout: 5 * time.Second}
	var resp *http.Response
	for i := 0; i < 50; i++ {
		resp, err = c.Post("https://"+addr+"/", "application/json", strings.NewReader(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u-1"}}`))
		if err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), WebhookDenial) || !strings.Contains(string(body), `"uid":"u-1"`) || !strings.Contains(string(body), `"allowed":false`) {
		t.Fatalf("answer %s", body)
	}
}

func TestDecodeReport(t *testing.T) {
	var k KernelReport
	if err := decodeReport([]byte("noise\n{\"version\":\"Linux 4.4.0\",\"gvisor\":true}\n"), &k); err != nil || !k.GVisor {
		t.Fatalf("%+v %v", k, err)
	}
	if err := decodeReport([]byte("panic: boom\n"), &k); err == nil || !strings.Contains(err.Error(), "no report") {
		t.Fatalf("err %v", err)
	}
}
