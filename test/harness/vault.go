package harness

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Vault is a running Vault dev server: in memory, unsealed, with a root token.
type Vault struct {
	// Addr is its address, http://127.0.0.1:port.
	Addr string
	// RootToken is the dev server's root token.
	RootToken string
	// LogPath is the server's log file.
	LogPath string
}

// StartVault starts `vault server -dev` from $AGENT_SANDBOX_VAULT_BIN on a free port, with a random root
// token passed through the environment (never argv), and stops it when the test ends.
func StartVault(t testing.TB) *Vault {
	t.Helper()
	bin := requireEnv(t, "AGENT_SANDBOX_VAULT_BIN", "the vault binary")
	requireExecutable(t, bin, "AGENT_SANDBOX_VAULT_BIN")
	var rnd [12]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		t.Fatal(err)
	}
	token := "root-" + hex.EncodeToString(rnd[:])
	dir := t.TempDir()

	// The port may be taken between FreePort and Vault's bind (and dev mode also binds port+1 for
	// clustering): try a few.
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := FreePort()
		if err != nil {
			t.Fatalf("free port: %v", err)
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		start := time.Now()
		p, err := startProcess("vault", dir, bin,
			[]string{"server", "-dev", "-dev-listen-address=" + addr, "-dev-no-store-token"},
			[]string{"VAULT_DEV_ROOT_TOKEN_ID=" + token, "VAULT_LOG_LEVEL=info"})
		if err != nil {
			t.Fatal(err)
		}
		v := &Vault{Addr: "http://" + addr, RootToken: token, LogPath: p.logPath}
		if lastErr = v.waitHealthy(p, 30*time.Second); lastErr != nil {
			p.stop(5 * time.Second)
			if p.exited() && attempt < 2 {
				continue
			}
			t.Fatalf("vault dev server: %v\n%s", lastErr, p.tail(40))
		}
		p.dumpOnFailure(t)
		t.Cleanup(func() { p.stop(10 * time.Second) })
		t.Logf("vault dev server ready at %s in %s", v.Addr, time.Since(start).Round(100*time.Millisecond))
		return v
	}
	t.Fatalf("vault dev server did not start: %v", lastErr)
	return nil
}

// waitHealthy polls sys/health until Vault is initialised, unsealed and active.
func (v *Vault) waitHealthy(p *process, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		if p.exited() {
			return fmt.Errorf("exited: %v", p.err)
		}
		resp, err := client.Get(v.Addr + "/v1/sys/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("sys/health answered %d", resp.StatusCode)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not healthy after %s: %w", timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Response is a raw Vault HTTP response.
type Response struct {
	Status int
	// Body is the decoded JSON body (nil for an empty one).
	Body map[string]any
	// Errors is Vault's "errors" list.
	Errors []string
}

// Data returns Body["data"] as a map.
func (r *Response) Data() map[string]any {
	d, _ := r.Body["data"].(map[string]any)
	return d
}

// Request calls Vault's HTTP API directly (method, path under /v1/, token, JSON body), without any of
// agent-sandbox's code: tests use it to check what Vault itself enforces.
func (v *Vault) Request(ctx context.Context, method, path, token string, body any) (*Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, v.Addr+"/v1/"+strings.TrimPrefix(path, "/"), rd)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("X-Vault-Token", token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	out := &Response{Status: resp.StatusCode}
	if len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, &out.Body); err != nil {
			return nil, fmt.Errorf("vault %s %s: HTTP %d, body is not JSON: %w", method, path, resp.StatusCode, err)
		}
		if errs, ok := out.Body["errors"].([]any); ok {
			for _, e := range errs {
				out.Errors = append(out.Errors, fmt.Sprint(e))
			}
		}
	}
	return out, nil
}
