package broker

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const (
	testVaultToken = "hvs.CAESIFakeVaultTokenForTheAgentUnitTest0123456789"
	testPodJWT     = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6c2FuZGJveDp0b29sIn0.cG9kLWp3dC1zaWc"
)

// fakeVault serves the three endpoints the agent calls. Each handler may be replaced by a test.
type fakeVault struct {
	mu       sync.Mutex
	login    func(w http.ResponseWriter, body map[string]any)
	creds    func(w http.ResponseWriter, body map[string]any)
	logins   int
	revoked  []string
	lastPath string
}

func newFakeVault(t *testing.T) (*fakeVault, *httptest.Server) {
	fv := &fakeVault{
		login: func(w http.ResponseWriter, body map[string]any) {
			if body["role"] != "agent-sandbox-get-pods" || body["jwt"] != testPodJWT {
				vaultReply(w, 403, map[string]any{"errors": []string{"permission denied"}})
				return
			}
			vaultReply(w, 200, map[string]any{"auth": map[string]any{"client_token": testVaultToken, "lease_duration": 600}})
		},
		creds: func(w http.ResponseWriter, body map[string]any) {
			if body["kubernetes_namespace"] != "team-a" {
				vaultReply(w, 400, map[string]any{"errors": []string{"kubernetes_namespace 'x' is not present in role's allowed_kubernetes_namespaces"}})
				return
			}
			vaultReply(w, 200, map[string]any{
				"lease_id": "k8s-creds/creds/agent-sandbox-pod-reader/abc", "lease_duration": 600,
				"data": map[string]any{"service_account_token": secretToken, "service_account_name": "v-as-pod-reader-1-x", "service_account_namespace": "team-a"},
			})
		},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		fv.mu.Lock()
		fv.lastPath = r.URL.Path
		fv.mu.Unlock()
		switch r.URL.Path {
		case "/v1/auth/k8s-auth/login":
			fv.mu.Lock()
			fv.logins++
			fv.mu.Unlock()
			fv.login(w, body)
		case "/v1/k8s-creds/creds/agent-sandbox-pod-reader":
			if r.Header.Get("X-Vault-Token") != testVaultToken {
				vaultReply(w, 403, map[string]any{"errors": []string{"permission denied"}})
				return
			}
			fv.creds(w, body)
		case "/v1/auth/token/revoke-self":
			fv.mu.Lock()
			fv.revoked = append(fv.revoked, r.Header.Get("X-Vault-Token"))
			fv.mu.Unlock()
			w.WriteHeader(http.StatusNoContent)
		default:
			vaultReply(w, 404, map[string]any{"errors": []string{"no handler"}})
		}
	}))
	t.Cleanup(srv.Close)
	return fv, srv
}

func vaultReply(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// agentFixture is an agent configuration with its files in a temporary directory.
func agentFixture(t *testing.T, addr string) (AgentConfig, *bytes.Buffer) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(tokenFile, []byte(testPodJWT+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(caFile, []byte(testCAPEM), 0o600); err != nil {
		t.Fatal(err)
	}
	var events bytes.Buffer
	return AgentConfig{
		VaultAddr: addr, AuthMount: "k8s-auth", AuthRole: "agent-sandbox-get-pods",
		SecretsMount: "k8s-creds", SecretsRole: "agent-sandbox-pod-reader", Namespace: "team-a", Scope: "pod-reader",
		TokenFile: tokenFile, APIServer: "https://192.0.2.2:6443", APICAFile: caFile,
		Out:          filepath.Join(dir, "kubeconfig"),
		LoginTimeout: 3 * time.Second,
		Events:       &events,
		Now:          func() time.Time { return time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC) },
	}, &events
}

// mustAgent is NewAgent(cfg), failing the test when cfg is refused.
func mustAgent(t *testing.T, cfg AgentConfig) *Agent {
	t.Helper()
	a, err := NewAgent(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func eventLines(t *testing.T, b *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("event line is not JSON: %q", line)
		}
		out = append(out, m)
	}
	return out
}

func assertNoSecrets(t *testing.T, what, s string) {
	t.Helper()
	for _, secret := range []string{testVaultToken, testPodJWT, secretToken, "eyJ"} {
		if strings.Contains(s, secret) {
			t.Errorf("%s contains a secret (%.12s...): %s", what, secret, s)
		}
	}
}

func TestAgentIssueAndRevoke(t *testing.T) {
	fv, srv := newFakeVault(t)
	cfg, events := agentFixture(t, srv.URL)
	a := mustAgent(t, cfg)
	cred, err := a.Issue(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if cred.ServiceAccount != "v-as-pod-reader-1-x" || cred.TTL != 10*time.Minute || cred.LeaseID == "" {
		t.Errorf("credential %v", cred)
	}
	fi, err := os.Stat(cfg.Out)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != KubeconfigMode {
		t.Errorf("kubeconfig mode %v", fi.Mode().Perm())
	}
	if b, _ := os.ReadFile(cfg.Out); !bytes.Contains(b, []byte(secretToken)) {
		t.Error("kubeconfig lacks the token")
	}
	if err := a.Revoke(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cfg.Out); !os.IsNotExist(err) {
		t.Errorf("kubeconfig still there after revoke: %v", err)
	}
	if len(fv.revoked) != 1 || fv.revoked[0] != testVaultToken {
		t.Errorf("revoke-self calls: %d", len(fv.revoked))
	}
	evs := eventLines(t, events)
	if len(evs) != 2 {
		t.Fatalf("events: %s", events)
	}
	issued, revoked := evs[0], evs[1]
	want := map[string]any{"event": EventIssued, "scope": "pod-reader", "namespace": "team-a", "lease_id": "k8s-creds/creds/agent-sandbox-pod-reader/abc",
		"ttl_seconds": float64(600), "service_account": "v-as-pod-reader-1-x", "time": "2026-11-30T12:00:00Z"}
	for k, v := range want {
		if issued[k] != v {
			t.Errorf("issued[%s] = %v, want %v", k, issued[k], v)
		}
	}
	if revoked["event"] != EventRevoked || revoked["lease_id"] != want["lease_id"] {
		t.Errorf("revoked event %v", revoked)
	}
	assertNoSecrets(t, "events", events.String())
	// A second revoke has nothing to do.
	if err := a.Revoke(context.Background()); err != nil {
		t.Errorf("second revoke: %v", err)
	}
}

func TestAgentRunRevokesOnCancel(t *testing.T) {
	fv, srv := newFakeVault(t)
	cfg, events := agentFixture(t, srv.URL)
	a := mustAgent(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for KubeconfigReady(cfg.Out) != nil {
		if time.Now().After(deadline) {
			t.Fatal("kubeconfig never written")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(fv.revoked) != 1 {
		t.Error("not revoked")
	}
	if evs := eventLines(t, events); len(evs) != 2 || evs[1]["event"] != EventRevoked {
		t.Errorf("events %s", events)
	}
}

func TestAgentLoginRefused(t *testing.T) {
	_, srv := newFakeVault(t)
	cfg, events := agentFixture(t, srv.URL)
	cfg.AuthRole = "agent-sandbox-wrong"
	a := mustAgent(t, cfg)
	start := time.Now()
	_, err := a.Issue(context.Background())
	if !errors.Is(err, ErrPermissionDenied) {
		t.Fatalf("err = %v, want permission denied", err)
	}
	if got, want := err.Error(), "vault login as role agent-sandbox-wrong failed: permission denied"; got != want {
		t.Errorf("error %q, want %q", got, want)
	}
	if time.Since(start) > time.Second {
		t.Errorf("a refusal was retried for %s", time.Since(start))
	}
	if _, err := os.Stat(cfg.Out); !os.IsNotExist(err) {
		t.Error("kubeconfig written after a failed login")
	}
	if events.Len() != 0 {
		t.Errorf("events after a failure: %s", events)
	}
}

func TestAgentRetriesTransientErrors(t *testing.T) {
	fv, srv := newFakeVault(t)
	ok := fv.login
	fv.login = func(w http.ResponseWriter, body map[string]any) {
		if fv.logins < 3 {
			vaultReply(w, 503, map[string]any{"errors": []string{"Vault is sealed"}})
			return
		}
		ok(w, body)
	}
	cfg, _ := agentFixture(t, srv.URL)
	cfg.LoginTimeout = 10 * time.Second
	a := mustAgent(t, cfg)
	if _, err := a.Issue(context.Background()); err != nil {
		t.Fatalf("Issue after two 503s: %v", err)
	}
	if fv.logins != 3 {
		t.Errorf("logins = %d, want 3", fv.logins)
	}
}

func TestAgentVaultUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := "http://" + l.Addr().String()
	l.Close()
	cfg, _ := agentFixture(t, addr)
	cfg.LoginTimeout = time.Second
	a := mustAgent(t, cfg)
	start := time.Now()
	_, err = a.Issue(context.Background())
	if !errors.Is(err, ErrVaultUnreachable) {
		t.Fatalf("err = %v, want unreachable", err)
	}
	if !strings.Contains(err.Error(), "vault at "+addr+" is unreachable") || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("error %q", err)
	}
	if d := time.Since(start); d < 500*time.Millisecond || d > 5*time.Second {
		t.Errorf("gave up after %s with a 1s login timeout", d)
	}
	if _, err := os.Stat(cfg.Out); !os.IsNotExist(err) {
		t.Error("kubeconfig written")
	}
}

func TestAgentMintRefusedRevokesToken(t *testing.T) {
	fv, srv := newFakeVault(t)
	cfg, _ := agentFixture(t, srv.URL)
	cfg.Namespace = "kube-system"
	a := mustAgent(t, cfg)
	_, err := a.Issue(context.Background())
	if !errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), "kube-system") {
		t.Fatalf("err = %v", err)
	}
	if len(fv.revoked) != 1 {
		t.Error("the Vault token was not revoked after the refused mint")
	}
	if _, err := os.Stat(cfg.Out); !os.IsNotExist(err) {
		t.Error("kubeconfig written")
	}
	assertNoSecrets(t, "error", err.Error())
}

func TestAgentConfigValidate(t *testing.T) {
	err := (&AgentConfig{}).Validate()
	if err == nil {
		t.Fatal("empty config is valid")
	}
	for _, want := range []string{"vault address", "auth role", "secrets role", "namespace", "token file", "API server", "login timeout"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %s: %v", want, err)
		}
	}
}

func TestAgentMissingTokenFile(t *testing.T) {
	_, srv := newFakeVault(t)
	cfg, _ := agentFixture(t, srv.URL)
	cfg.TokenFile = filepath.Join(t.TempDir(), "nope")
	a := mustAgent(t, cfg)
	if _, err := a.Issue(context.Background()); err == nil || !strings.Contains(err.Error(), "read service-account token") {
		t.Errorf("err = %v", err)
	}
}

func TestAgentRevokeAfterTokenExpiry(t *testing.T) {
	_, srv := newFakeVault(t) // the Vault token's lease_duration is 600
	cfg, events := agentFixture(t, srv.URL)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	cfg.Now = func() time.Time { return now }
	a := mustAgent(t, cfg)
	if _, err := a.Issue(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Ten minutes later Vault has expired the token and answers 403 to revoke-self.
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		vaultReply(w, 403, map[string]any{"errors": []string{"permission denied"}})
	})
	now = now.Add(601 * time.Second)
	if err := a.Revoke(context.Background()); err != nil {
		t.Fatalf("revoke after expiry: %v", err)
	}
	evs := eventLines(t, events)
	if last := evs[len(evs)-1]; last["event"] != EventRevoked || last["expired"] != true {
		t.Errorf("last event %v", last)
	}
}

func TestAgentRevokeFailure(t *testing.T) {
	_, srv := newFakeVault(t)
	cfg, events := agentFixture(t, srv.URL)
	a := mustAgent(t, cfg)
	if _, err := a.Issue(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		vaultReply(w, 403, map[string]any{"errors": []string{"permission denied"}})
	})
	err := a.Revoke(context.Background())
	if !errors.Is(err, ErrPermissionDenied) || !strings.Contains(err.Error(), "the lease ends with its TTL") {
		t.Fatalf("err = %v", err)
	}
	if _, statErr := os.Stat(cfg.Out); !os.IsNotExist(statErr) {
		t.Error("kubeconfig left behind after a failed revoke")
	}
	evs := eventLines(t, events)
	if last := evs[len(evs)-1]; last["event"] != EventRevokeFailed {
		t.Errorf("last event %v", last)
	}
	assertNoSecrets(t, "events", events.String())
}

// TestAgentEventsScrubTheIssuedTokenByValue gives the agent a token with no shape any pattern knows and
// has Vault echo it in the error of a failed revocation: only scrubbing by the exact value issued keeps
// it out of the event stream.
func TestAgentEventsScrubTheIssuedTokenByValue(t *testing.T) {
	const opaque = "opaque7Kq2ZxV9mWb4Tn8"
	fv, srv := newFakeVault(t)
	fv.creds = func(w http.ResponseWriter, _ map[string]any) {
		vaultReply(w, 200, map[string]any{
			"lease_id": "k8s-creds/creds/agent-sandbox-pod-reader/abc", "lease_duration": 600,
			"data": map[string]any{"service_account_token": opaque, "service_account_name": "v-as-pod-reader-1-x", "service_account_namespace": "team-a"},
		})
	}
	cfg, events := agentFixture(t, srv.URL)
	a := mustAgent(t, cfg)
	if _, err := a.Issue(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		vaultReply(w, 500, map[string]any{"errors": []string{"internal error revoking " + opaque + " (pod " + testPodJWT + ")"}})
	})
	if err := a.Revoke(context.Background()); err == nil {
		t.Fatal("Revoke succeeded against a failing Vault")
	}
	evs := eventLines(t, events)
	if last := evs[len(evs)-1]; last["event"] != EventRevokeFailed || !strings.Contains(fmt.Sprint(last["error"]), "<redacted:secret>") {
		t.Errorf("last event %v, want %s with the token redacted", last, EventRevokeFailed)
	}
	if strings.Contains(events.String(), opaque) {
		t.Errorf("events contain the issued token: %s", events.String())
	}
	assertNoSecrets(t, "events", events.String())
}

// zipPlan is a saved plan as Terraform writes it, a zip archive of these entries stored with method, in
// base64 as the tool's result carries it.
func zipPlan(t *testing.T, method uint16, entries map[string]string) string {
	t.Helper()
	var zbuf bytes.Buffer
	zw := zip.NewWriter(&zbuf)
	for name, body := range entries {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: name, Method: method})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(zbuf.Bytes())
}

// reportPlan has an agent that issued and revoked its credential report a tool result whose saved plan is
// plan, and returns the event it reported last.
func reportPlan(t *testing.T, plan string) map[string]any {
	t.Helper()
	_, srv := newFakeVault(t)
	cfg, events := agentFixture(t, srv.URL)
	cfg.ResultFile = filepath.Join(t.TempDir(), "result.json")
	result, _ := json.Marshal(map[string]any{"plan_id": "abc", "plan": plan})
	if err := os.WriteFile(cfg.ResultFile, result, 0o600); err != nil {
		t.Fatal(err)
	}
	a := mustAgent(t, cfg)
	if _, err := a.Issue(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := a.Revoke(context.Background()); err != nil {
		t.Fatal(err)
	}
	a.ReportResult()
	evs := eventLines(t, events)
	return evs[len(evs)-1]
}

// TestAgentRefusesAPlanHoldingTheCredentialCompressed writes a tool result whose saved plan — a zip archive
// with Deflate entries, as Terraform writes it — holds the issued token in one of its entries. The bytes
// of the archive do not contain the token (it is compressed), but whoever unpacks the plan (the MCP
// server, the approver, terraform show) reads it: the agent must look inside the archive's entries.
func TestAgentRefusesAPlanHoldingTheCredentialCompressed(t *testing.T) {
	for _, method := range []uint16{zip.Store, zip.Deflate} {
		t.Run(fmt.Sprint("method ", method), func(t *testing.T) {
			last := reportPlan(t, zipPlan(t, method, map[string]string{
				"tfplan":  "planned values: \x12\x08 " + strings.Repeat("padding ", 32),
				"tfstate": `{"version":4,"resources":[{"instances":[{"attributes":{"data":{"k":"` + secretToken + `"}}}]}]}`,
			}))
			if last["event"] != EventToolResult || last["result"] != nil || last["error"] != "the tool's result holds the credential" {
				t.Errorf("a plan holding the issued token (zip method %d) was reported: %v", method, last)
			}
		})
	}
}

// TestAgentReportsACleanCompressedPlan: a saved plan without the credential passes unchanged, and one that
// unpacks to more than the agent looks through is refused rather than let out unread.
func TestAgentReportsACleanCompressedPlan(t *testing.T) {
	zipOf := func(body []byte) string { return zipPlan(t, zip.Deflate, map[string]string{"tfplan": string(body)}) }
	real, err := os.ReadFile("../internal/tfcheck/testdata/plans/runner-backend.tfplan")
	if err != nil {
		t.Fatal(err)
	}
	for _, clean := range []string{zipOf(bytes.Repeat([]byte(`{"attributes":{"data":{"k":"value"}}} `), 20000)), base64.StdEncoding.EncodeToString(real)} {
		ev := reportPlan(t, clean)
		if r, ok := ev["result"].(map[string]any); !ok || r["plan"] != clean {
			t.Errorf("a clean plan was not reported unchanged: %.300v", ev)
		}
	}
	// Base64 that does not decode whole: a reader decodes the archive before the stray padding and finds the
	// token, which the agent, failing to decode, never looked for.
	if ev := reportPlan(t, zipPlan(t, zip.Deflate, map[string]string{"tfstate": secretToken})+"=AAAA"); ev["result"] != nil || ev["error"] != "the tool's result holds the credential" {
		t.Errorf("a binary field that is not base64 was reported: %.300v", ev)
	}
	bomb := zipOf(make([]byte, maxUnpackedBytes+1))
	if ev := reportPlan(t, bomb); ev["result"] != nil || ev["error"] != "the tool's result holds the credential" {
		t.Errorf("a plan unpacking to more than %d bytes was reported: %.300v", maxUnpackedBytes, ev)
	}
}

// TestAgentScrubsItsVaultTokenByValue gives the agent a Vault token with no shape any pattern knows, and has
// Vault echo it: in the error of a failed mint (which the agent prints as its last line, and the kubelet makes
// the termination message the MCP server reads) and of a failed revocation (an event). Only scrubbing by the
// exact value the agent was issued keeps it out.
func TestAgentScrubsItsVaultTokenByValue(t *testing.T) {
	const opaqueVault = "opaqueVaultTok3n7Kq2ZxV9mWb4Tn8"
	fv, srv := newFakeVault(t)
	fv.login = func(w http.ResponseWriter, _ map[string]any) {
		vaultReply(w, 200, map[string]any{"auth": map[string]any{"client_token": opaqueVault, "lease_duration": 600}})
	}
	var fail bool
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v1/auth/k8s-auth/login":
			fv.login(w, nil)
		case r.URL.Path == "/v1/k8s-creds/creds/agent-sandbox-pod-reader" && fail:
			vaultReply(w, 400, map[string]any{"errors": []string{"token " + r.Header.Get("X-Vault-Token") + " may not mint here"}})
		case r.URL.Path == "/v1/k8s-creds/creds/agent-sandbox-pod-reader":
			fv.creds(w, map[string]any{"kubernetes_namespace": "team-a"})
		case r.URL.Path == "/v1/auth/token/revoke-self" && fail:
			w.WriteHeader(http.StatusNoContent)
		default:
			vaultReply(w, 500, map[string]any{"errors": []string{"cannot revoke " + r.Header.Get("X-Vault-Token")}})
		}
	})

	// A failed mint: the error the agent prints.
	fail = true
	cfg, _ := agentFixture(t, srv.URL)
	a := mustAgent(t, cfg)
	_, err := a.Issue(context.Background())
	if err == nil {
		t.Fatal("Issue succeeded against a Vault that refuses the mint")
	}
	if got := a.Scrubber().String(err.Error()); strings.Contains(got, opaqueVault) || !strings.Contains(err.Error(), opaqueVault) {
		t.Errorf("the mint error, scrubbed as the agent prints it, holds the Vault token: %s", got)
	}

	// A failed revocation: the event.
	fail = false
	cfg, events := agentFixture(t, srv.URL)
	a = mustAgent(t, cfg)
	if _, err := a.Issue(context.Background()); err != nil {
		t.Fatal(err)
	}
	err = a.Revoke(context.Background())
	if err == nil {
		t.Fatal("Revoke succeeded against a failing Vault")
	}
	if strings.Contains(events.String(), opaqueVault) {
		t.Errorf("events hold the agent's Vault token: %s", events.String())
	}
	if got := a.Scrubber().String(err.Error()); strings.Contains(got, opaqueVault) {
		t.Errorf("the revoke error, scrubbed as the agent prints it, holds the Vault token: %s", got)
	}
}

// TestAgentRevokeRetriesTransientErrors: one 503 at revocation (a standby during a leader election) is
// retried, and the lease is revoked. Found in review (2026-12-06): the agent tried once, forgot its token
// and left the credential valid until its TTL.
func TestAgentRevokeRetriesTransientErrors(t *testing.T) {
	fv, srv := newFakeVault(t)
	cfg, events := agentFixture(t, srv.URL)
	a := mustAgent(t, cfg)
	if _, err := a.Issue(context.Background()); err != nil {
		t.Fatal(err)
	}
	inner := srv.Config.Handler
	var calls atomic.Int32
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/auth/token/revoke-self" && calls.Add(1) == 1 {
			vaultReply(w, 503, map[string]any{"errors": []string{"Vault is sealed"}})
			return
		}
		inner.ServeHTTP(w, r)
	})
	if err := a.Revoke(context.Background()); err != nil {
		t.Fatalf("revoke after one 503: %v", err)
	}
	evs := eventLines(t, events)
	if last := evs[len(evs)-1]; last["event"] != EventRevoked || calls.Load() != 2 || len(fv.revoked) != 1 {
		t.Errorf("revoke-self calls %d, revocations %d, last event %v; want 2, 1, %s", calls.Load(), len(fv.revoked), last["event"], EventRevoked)
	}
}

// TestAgentMayHoldCredential: true from the login until the token is revoked; false after a failed login,
// after a mint that failed and whose token was revoked, and after Revoke. (A restarted credential agent
// issues again only when its predecessor ended with false.)
func TestAgentMayHoldCredential(t *testing.T) {
	fv, srv := newFakeVault(t)
	cfg, _ := agentFixture(t, srv.URL)
	a := mustAgent(t, cfg)
	if _, err := a.Issue(context.Background()); err != nil || !a.MayHoldCredential() {
		t.Fatalf("issued: %v, may hold %v; want true", err, a.MayHoldCredential())
	}
	if err := a.Revoke(context.Background()); err != nil || a.MayHoldCredential() {
		t.Fatalf("revoked: %v, may hold %v; want false", err, a.MayHoldCredential())
	}
	fv.creds = func(w http.ResponseWriter, _ map[string]any) {
		vaultReply(w, 400, map[string]any{"errors": []string{"namespace not allowed"}})
	}
	b := mustAgent(t, cfg)
	if _, err := b.Issue(context.Background()); err == nil || b.MayHoldCredential() {
		t.Fatalf("mint refused, token revoked: %v, may hold %v; want an error and false", err, b.MayHoldCredential())
	}
	cfg.VaultAddr = "http://127.0.0.1:1"
	cfg.LoginTimeout = time.Second
	c := mustAgent(t, cfg)
	if _, err := c.Issue(context.Background()); err == nil || c.MayHoldCredential() {
		t.Fatalf("login failed: %v, may hold %v; want an error and false", err, c.MayHoldCredential())
	}
}

// TestAgentWithholdsTheResultWhenTheRevokeFails: a tool that is not one of this binary's runners (a policy may
// add one) writes the issued token hex-encoded into its result, an encoding the exact-value scrubbing does
// not know; Vault then fails the revocation (503 past the retry budget, or a refusal before the token
// expired). The token is live until its lease ends, so the result must not leave the Pod: the tool.result
// event carries an error instead, after credential.revoke_failed. Found by a security review: Run released
// the result whatever the revocation returned.
func TestAgentWithholdsTheResultWhenTheRevokeFails(t *testing.T) {
	leaked := hex.EncodeToString([]byte(secretToken))
	for _, tc := range []struct {
		name   string
		status int
	}{
		{"503 past the retry budget", http.StatusServiceUnavailable},
		{"500 past the retry budget", http.StatusInternalServerError},
		{"refused before the token expired", http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, srv := newFakeVault(t)
			inner := srv.Config.Handler
			var revokes atomic.Int32
			srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/v1/auth/token/revoke-self" {
					revokes.Add(1)
					vaultReply(w, tc.status, map[string]any{"errors": []string{"cannot revoke now"}})
					return
				}
				inner.ServeHTTP(w, r)
			})
			cfg, events := agentFixture(t, srv.URL)
			cfg.ResultFile = filepath.Join(t.TempDir(), "result.json")
			if err := os.WriteFile(cfg.ResultFile, []byte(`{"text":"`+leaked+`"}`), 0o600); err != nil {
				t.Fatal(err)
			}
			a := mustAgent(t, cfg)
			err := runUntilIssued(t, a, cfg.Out)
			if err == nil || !a.MayHoldCredential() {
				t.Fatalf("Run against a Vault that fails the revocation: %v, may hold %v; want an error and true", err, a.MayHoldCredential())
			}
			if tc.status != http.StatusForbidden && revokes.Load() < 2 {
				t.Errorf("revoke-self tried %d times; a transient failure is retried", revokes.Load())
			}
			evs := eventLines(t, events)
			var names []any
			for _, ev := range evs {
				names = append(names, ev["event"])
				if ev["event"] == EventToolResult && ev["result"] != nil {
					t.Errorf("a tool.result carries the result although the credential is live: %v", ev)
				}
			}
			if n := len(evs); n < 2 || evs[n-2]["event"] != EventRevokeFailed || evs[n-1]["event"] != EventToolResult ||
				evs[n-1]["error"] != "the credential could not be revoked; the tool's result is withheld" {
				t.Errorf("events %v; want %s then %s with the withheld error: %s", names, EventRevokeFailed, EventToolResult, events)
			}
			if strings.Contains(events.String(), leaked) {
				t.Errorf("the events hold the hex-encoded token: %s", events)
			}
		})
	}
}

// runUntilIssued runs a until its kubeconfig at out is written, then stops it as the kubelet's SIGTERM
// does, and returns what Run returned.
func runUntilIssued(t *testing.T, a *Agent, out string) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for KubeconfigReady(out) != nil {
		select {
		case err := <-done:
			t.Fatalf("Run ended before the kubeconfig was written: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("kubeconfig never written")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	return <-done
}

// TestAgentReleasesTheResultOnceNoCredentialIsValid: the result leaves the Pod once the credential is revoked,
// or once Vault refuses the revocation because the token had already expired (which revoked its lease), and
// not before the revocation.
func TestAgentReleasesTheResultOnceNoCredentialIsValid(t *testing.T) {
	withResult := func(t *testing.T, cfg *AgentConfig) {
		t.Helper()
		cfg.ResultFile = filepath.Join(t.TempDir(), "result.json")
		if err := os.WriteFile(cfg.ResultFile, []byte(`{"text":"3 pods running"}`), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	released := func(t *testing.T, events *bytes.Buffer) {
		t.Helper()
		evs := eventLines(t, events)
		last := evs[len(evs)-1]
		if r, ok := last["result"].(map[string]any); last["event"] != EventToolResult || !ok || r["text"] != "3 pods running" {
			t.Errorf("last event %v; want the tool's result", last)
		}
	}
	t.Run("revoked", func(t *testing.T) {
		_, srv := newFakeVault(t)
		cfg, events := agentFixture(t, srv.URL)
		withResult(t, &cfg)
		if err := runUntilIssued(t, mustAgent(t, cfg), cfg.Out); err != nil {
			t.Fatal(err)
		}
		released(t, events)
	})
	t.Run("expired", func(t *testing.T) {
		_, srv := newFakeVault(t) // the Vault token's lease_duration is 600
		cfg, events := agentFixture(t, srv.URL)
		withResult(t, &cfg)
		now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
		cfg.Now = func() time.Time { return now }
		a := mustAgent(t, cfg)
		if _, err := a.Issue(context.Background()); err != nil {
			t.Fatal(err)
		}
		a.ReportResult()
		if last := eventLines(t, events)[1]; last["event"] != EventToolResult || last["result"] != nil || last["error"] != errWithheld {
			t.Errorf("reported before the revocation: %v", last)
		}
		srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			vaultReply(w, 403, map[string]any{"errors": []string{"permission denied"}})
		})
		now = now.Add(601 * time.Second)
		if err := a.Revoke(context.Background()); err != nil {
			t.Fatalf("revoke after expiry: %v", err)
		}
		a.ReportResult()
		released(t, events)
	})
}
