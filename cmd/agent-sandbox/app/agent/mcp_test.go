package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/cli"
	"github.com/agent-sandbox/agent-sandbox/internal/telemetry"
	"github.com/agent-sandbox/agent-sandbox/internal/telemetry/telemetrytest"
	"github.com/agent-sandbox/agent-sandbox/mcp"
	"github.com/agent-sandbox/agent-sandbox/test/harness"
)

// mcpFixture is what `agent-sandbox mcp` needs to start without a cluster: the real policy, a kubeconfig
// for an API server nobody calls, a workspaces folder, and the state files in a temporary folder.
func mcpFixture(t *testing.T) (dir string, args []string) {
	t.Helper()
	dir = t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "workspaces"), 0o700); err != nil {
		t.Fatal(err)
	}
	return dir, []string{"mcp", "--policy", "../../../../policy/policy.yaml", "--kubeconfig", "../testdata/unreachable.kubeconfig",
		"--workspaces", filepath.Join(dir, "workspaces"), "--db", filepath.Join(dir, "approvals.db"),
		"--audit-log", filepath.Join(dir, "audit.jsonl")}
}

func writeToken(t *testing.T, dir, token string) string {
	t.Helper()
	f := filepath.Join(dir, "http-token")
	if err := os.WriteFile(f, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestMCPHTTPFlags: the HTTP server does not start without a token, on loopback or not, nor with a weak
// token, a bad origin or an unknown log level; each is a usage error (exit 2) and nothing is served.
func TestMCPHTTPFlags(t *testing.T) {
	dir, base := mcpFixture(t)
	good := writeToken(t, dir, strings.Repeat("k", 40))
	weak := filepath.Join(dir, "weak")
	if err := os.WriteFile(weak, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	unsetTokenEnv(t)
	for _, tc := range []struct {
		name string
		args []string
		env  string // the value of $AGENT_SANDBOX_HTTP_TOKEN, if not empty
		want string
	}{
		{"no token on loopback", []string{"--http", "127.0.0.1:0"}, "", "error: --http needs --http-token-file or $AGENT_SANDBOX_HTTP_TOKEN"},
		{"no token on all interfaces", []string{"--http", ":8765"}, "", "error: refusing to serve MCP on :8765, a non-loopback address, without authentication"},
		{"no token on a LAN address", []string{"--http", "192.0.2.10:8765"}, "", "a non-loopback address, without authentication"},
		{"no token on a host name", []string{"--http", "myhost.example:8765"}, "", "a non-loopback address, without authentication"},
		{"weak token", []string{"--http", "127.0.0.1:0", "--http-token-file", weak}, "", "the token must be one word of at least 32 printable ASCII characters"},
		{"missing token file", []string{"--http", "127.0.0.1:0", "--http-token-file", filepath.Join(dir, "nope")}, "", "--http-token-file: open"},
		{"weak token in the environment", []string{"--http", "127.0.0.1:0"}, "short", "$AGENT_SANDBOX_HTTP_TOKEN: the token must be one word"},
		{"token with a space in the environment", []string{"--http", "127.0.0.1:0"}, strings.Repeat("k", 20) + " " + strings.Repeat("k", 20), "$AGENT_SANDBOX_HTTP_TOKEN: the token must be one word"},
		{"two tokens", []string{"--http", "127.0.0.1:0", "--http-token-file", good}, strings.Repeat("e", 40), "--http-token-file and $AGENT_SANDBOX_HTTP_TOKEN both give a token"},
		{"bad origin", []string{"--http", "127.0.0.1:0", "--http-token-file", good, "--http-allowed-origin", "*"}, "", `allowed origin "*"`},
		{"bad address", []string{"--http", "8765", "--http-token-file", good}, "", `--http "8765"`},
		{"token without --http", []string{"--http-token-file", good}, "", "--http-token-file, --http-allowed-origin and --http-stateful need --http"},
		{"stateful without --http", []string{"--http-stateful"}, "", "--http-token-file, --http-allowed-origin and --http-stateful need --http"},
		{"unknown log level", []string{"--log-level", "verbose"}, "", `--log-level "verbose": want debug, info, warn or error`},
		{"log level with offset", []string{"--log-level", "info+4"}, "", `--log-level "info+4"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv(EnvHTTPToken, tc.env)
			}
			code, stdout, stderr := testMain.Capture(append(append([]string{}, base...), tc.args...)...)
			if code != cli.ExitUsage || stdout != "" || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 2 and %q", code, stdout, stderr, tc.want)
			}
		})
	}
}

// unsetTokenEnv keeps the caller's environment from giving the server a token, for the test's duration.
func unsetTokenEnv(t *testing.T) {
	t.Helper()
	for _, name := range []string{EnvHTTPToken, "AGENT_SANDBOX_HTTP_TOKEN_FILE"} {
		t.Setenv(name, "")
		os.Unsetenv(name)
	}
}

// startMCPHTTP runs the real `agent-sandbox mcp` with args (which serve HTTP on a loopback port) until the
// test ends, and returns the MCP endpoint it logged and its output streams.
func startMCPHTTP(t *testing.T, args []string) (endpoint string, stdout, stderr *harness.SyncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stdout, stderr = &harness.SyncBuffer{}, &harness.SyncBuffer{}
	exited := make(chan int, 1)
	go func() { exited <- testMain(ctx, args, strings.NewReader(""), stdout, stderr) }()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-exited:
			if code != 0 {
				t.Errorf("mcp --http exited %d on cancel; stderr:\n%s", code, stderr.String())
			}
		case <-time.After(10 * time.Second):
			t.Error("mcp --http did not stop on cancel")
		}
	})

	// The bound address is in the "serving" log line.
	for deadline := time.Now().Add(10 * time.Second); endpoint == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		sc := bufio.NewScanner(strings.NewReader(stderr.String()))
		for sc.Scan() {
			var line struct{ Msg, Endpoint string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "serving MCP over streamable HTTP" {
				endpoint = line.Endpoint
			}
		}
		select {
		case code := <-exited:
			exited <- code // for the clean-up
			t.Fatalf("mcp --http exited %d; stderr:\n%s", code, stderr.String())
		default:
		}
	}
	if !strings.HasSuffix(endpoint, "/mcp") {
		t.Fatalf("no endpoint logged; stderr:\n%s", stderr.String())
	}
	return endpoint, stdout, stderr
}

// httpDo sends one request, a POST being an MCP initialize, and returns the status and body.
func httpDo(t *testing.T, method, url string, h map[string]string) (int, string) {
	t.Helper()
	req, err := harness.NewMCPRequest(method, url, h)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestMCPHTTPTokenFromEnv: the token can come from $AGENT_SANDBOX_HTTP_TOKEN instead of a file, and is
// then required just the same.
func TestMCPHTTPTokenFromEnv(t *testing.T) {
	unsetTokenEnv(t)
	_, args := mcpFixture(t)
	token := "env-" + strings.Repeat("9876543210", 4)
	t.Setenv(EnvHTTPToken, token)
	endpoint, _, stderr := startMCPHTTP(t, append(args, "--http", "127.0.0.1:0"))
	if code, _ := httpDo(t, http.MethodPost, endpoint, nil); code != http.StatusUnauthorized {
		t.Errorf("no token: HTTP %d, want 401", code)
	}
	if code, body := httpDo(t, http.MethodPost, endpoint, map[string]string{"Authorization": "Bearer " + token}); code != http.StatusOK {
		t.Errorf("the token from the environment: HTTP %d %s", code, body)
	}
	if strings.Contains(stderr.String(), token) {
		t.Errorf("the token was logged:\n%s", stderr.String())
	}
}

// TestMCPHTTPServe runs the real `agent-sandbox mcp --http` on a loopback port and talks to it over HTTP:
// a foreign Origin and a missing or wrong token are refused, the MCP SDK client with the token calls a
// tool end to end (approval_status reads the approvals database), and /healthz and /metrics answer.
func TestMCPHTTPServe(t *testing.T) {
	unsetTokenEnv(t)
	dir, args := mcpFixture(t)
	token := "tok-" + strings.Repeat("0123456789", 4)
	args = append(args, "--http", "127.0.0.1:0", "--http-token-file", writeToken(t, dir, token),
		"--http-allowed-origin", "https://console.example.com")
	ctx := context.Background()
	endpoint, stdout, stderr := startMCPHTTP(t, args)
	base := strings.TrimSuffix(endpoint, "/mcp")
	do := func(method, url string, h map[string]string) (int, string) {
		t.Helper()
		return httpDo(t, method, url, h)
	}
	auth := "Bearer " + token
	if code, _ := do(http.MethodPost, endpoint, map[string]string{"Authorization": auth, "Origin": "https://evil.example"}); code != http.StatusForbidden {
		t.Errorf("foreign Origin with the token: HTTP %d, want 403", code)
	}
	if code, body := do(http.MethodPost, endpoint, map[string]string{"Authorization": auth, "Origin": "https://console.example.com"}); code != http.StatusOK {
		t.Errorf("the allowed Origin with the token: HTTP %d %s", code, body)
	}
	if code, _ := do(http.MethodPost, endpoint, map[string]string{"Origin": "https://console.example.com"}); code != http.StatusUnauthorized {
		t.Errorf("the allowed Origin without the token: HTTP %d, want 401", code)
	}
	if code, _ := do(http.MethodPost, endpoint, nil); code != http.StatusUnauthorized {
		t.Errorf("no token: HTTP %d, want 401", code)
	}
	if code, _ := do(http.MethodPost, endpoint, map[string]string{"Authorization": "Bearer " + strings.Repeat("x", len(token))}); code != http.StatusUnauthorized {
		t.Errorf("wrong token: HTTP %d, want 401", code)
	}
	if _, err := mcp.DialHTTP(ctx, endpoint, "wrong-"+token); err == nil {
		t.Error("the MCP client connected with a wrong token")
	}

	c, err := mcp.DialHTTP(ctx, endpoint, token)
	if err != nil {
		t.Fatal(err)
	}
	if name := c.ServerName(); !strings.HasPrefix(name, "agent-sandbox ") {
		t.Errorf("server name %q", name)
	}
	if v := c.ProtocolVersion(); v != mcp.ProtocolVersion20260728 {
		t.Errorf("the default (stateless) server agreed on protocol version %q, want %s", v, mcp.ProtocolVersion20260728)
	}
	res, err := c.Call(ctx, "approval_status", map[string]any{"request_id": "req-0000000000aa"})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.Contains(res.Text, "no approval request req-0000000000aa") {
		t.Errorf("approval_status of an unknown request: %+v", res)
	}
	if err := c.Close(); err != nil {
		t.Error(err)
	}

	if code, body := do(http.MethodGet, base+"/healthz", nil); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz: HTTP %d %q", code, body)
	}
	if code, _ := do(http.MethodGet, base+"/metrics", nil); code != http.StatusUnauthorized {
		t.Errorf("/metrics without the token: HTTP %d", code)
	}
	code, body := do(http.MethodGet, base+"/metrics", map[string]string{"Authorization": auth})
	if code != http.StatusOK || !strings.Contains(body, `agent_sandbox_mcp_tool_calls_total{outcome="invalid",tool="approval_status"} 1`) ||
		!strings.Contains(body, "go_goroutines") {
		t.Errorf("/metrics: HTTP %d\n%s", code, body)
	}
	if strings.Contains(stderr.String(), token) || stdout.String() != "" {
		t.Errorf("the token was logged, or something went to stdout:\nstdout %q\nstderr %s", stdout.String(), stderr.String())
	}
}

// TestMCPHTTPStateful: with --http-stateful the real server gives each client a session (Mcp-Session-Id)
// and a 2026-07-28 client falls back to 2025-11-25; by default a raw initialize gets no session.
func TestMCPHTTPStateful(t *testing.T) {
	unsetTokenEnv(t)
	dir, args := mcpFixture(t)
	token := "tok-" + strings.Repeat("0123456789", 4)
	args = append(args, "--http", "127.0.0.1:0", "--http-token-file", writeToken(t, dir, token))
	initialize := func(endpoint string) string {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, endpoint, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("initialize: HTTP %d", resp.StatusCode)
		}
		return resp.Header.Get("Mcp-Session-Id")
	}
	stateless, _, _ := startMCPHTTP(t, args)
	if id := initialize(stateless); id != "" {
		t.Errorf("the default server answered initialize with session %q", id)
	}
	stateful, _, stderr := startMCPHTTP(t, append(args, "--http-stateful"))
	if id := initialize(stateful); id == "" {
		t.Error("--http-stateful answered initialize without a session")
	}
	c, err := mcp.DialHTTP(context.Background(), stateful, token)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if v := c.ProtocolVersion(); v != mcp.ProtocolVersion20251125 {
		t.Errorf("--http-stateful agreed on %q, want %s", v, mcp.ProtocolVersion20251125)
	}
	if !strings.Contains(stderr.String(), `"stateless":false`) {
		t.Errorf("the serving line does not say stateless=false:\n%s", stderr.String())
	}
}

// TestMCPOTLPFlags: a tracing endpoint that is not an http(s) URL is a usage error (exit 2), whether it
// comes from the flag or from the standard environment variable.
func TestMCPOTLPFlags(t *testing.T) {
	_, base := mcpFixture(t)
	for _, tc := range []struct {
		name string
		args []string
		env  string // $OTEL_EXPORTER_OTLP_ENDPOINT
		want string
	}{
		{"no scheme", []string{"--otlp-endpoint", "127.0.0.1:4318"}, "", `--otlp-endpoint "127.0.0.1:4318": want an http:// or https:// URL`},
		{"grpc", []string{"--otlp-endpoint", "grpc://c:4317"}, "", "want an http:// or https:// URL"},
		{"from the environment", nil, "collector", "$" + telemetry.EnvEndpoint + ` "collector"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(telemetry.EnvEndpoint, tc.env)
			t.Setenv(telemetry.EnvTracesEndpoint, "")
			code, stdout, stderr := testMain.Capture(append(append([]string{}, base...), tc.args...)...)
			if code != cli.ExitUsage || stdout != "" || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 2 and %q", code, stdout, stderr, tc.want)
			}
		})
	}
}

// TestMCPHTTPTraces runs the real `agent-sandbox mcp --http --otlp-endpoint` against a real OTLP/HTTP
// receiver: a tool call (refused by the policy, so no cluster is needed) arrives as a trace whose ID is
// derived from the call's request ID in the audit log.
func TestMCPHTTPTraces(t *testing.T) {
	unsetTokenEnv(t)
	recv := telemetrytest.NewReceiver(t)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50") // export each span batch within 50 ms, not 5 s
	dir, args := mcpFixture(t)
	token := "tok-" + strings.Repeat("0123456789", 4)
	args = append(args, "--http", "127.0.0.1:0", "--http-token-file", writeToken(t, dir, token), "--otlp-endpoint", recv.URL)
	ctx := context.Background()
	endpoint, _, _ := startMCPHTTP(t, args)
	c, err := mcp.DialHTTP(ctx, endpoint, token)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	res, err := c.Call(ctx, "k8s_get_pod_status", map[string]any{"namespace": "kube-system"})
	if err != nil || !res.IsError {
		t.Fatalf("a call in kube-system: %+v, %v", res, err)
	}
	log, err := os.ReadFile(filepath.Join(dir, "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var first struct {
		RequestID string `json:"request_id"`
	}
	if err := json.Unmarshal([]byte(strings.SplitN(string(log), "\n", 2)[0]), &first); err != nil || first.RequestID == "" {
		t.Fatalf("audit log: %v\n%s", err, log)
	}

	var root *telemetrytest.ReceivedSpan
	for deadline := time.Now().Add(10 * time.Second); root == nil && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, s := range recv.Spans() {
			if s.Name == "tools/call k8s_get_pod_status" {
				root = &s
			}
		}
	}
	if root == nil {
		t.Fatalf("no trace of the call arrived; got %+v", recv.Spans())
	}
	if root.TraceID != telemetry.TraceIDFor(first.RequestID).String() || root.Attrs[telemetry.AttrRequestID] != first.RequestID ||
		root.Attrs["agent_sandbox.outcome"] != "denied" {
		t.Errorf("call span %+v; want trace %s of request %s, outcome denied", root, telemetry.TraceIDFor(first.RequestID), first.RequestID)
	}
}
