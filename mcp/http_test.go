package mcp

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/test/harness"
)

const testToken = "0123456789abcdef0123456789abcdef-test-token"

// httpServer serves the MCP server over real HTTP (a loopback listener) as `agent-sandbox mcp --http`
// does: the same handler, metrics on their own registry.
func httpServer(t *testing.T, allowedOrigins ...string) *httptest.Server {
	t.Helper()
	h, _ := httpHandler(t, HTTPOptions{AllowedOrigins: allowedOrigins})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// httpHandler is one server process's HTTP handler over its own fake service, with o's transport options
// and the test token.
func httpHandler(t *testing.T, o HTTPOptions) (http.Handler, *fakeService) {
	t.Helper()
	p, err := policy.LoadFile("../policy/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	svc := &fakeService{p: p}
	server, err := NewServer(Instrument(svc, m), "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	o.Token, o.Gatherer, o.Log = testToken, reg, slog.New(slog.DiscardHandler)
	h, err := HTTPHandler(server, o)
	if err != nil {
		t.Fatal(err)
	}
	return h, svc
}

// headers adds fixed headers to every request of an HTTP client: what a browser or a misconfigured client
// would send.
type headers struct {
	set  map[string]string
	next http.RoundTripper
}

func (h headers) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.set {
		r.Header.Set(k, v)
	}
	return h.next.RoundTrip(r)
}

// dial connects the SDK's streamable HTTP client to srv with the given extra headers.
func dial(t *testing.T, srv *httptest.Server, set map[string]string) (*sdk.ClientSession, error) {
	t.Helper()
	hc := &http.Client{Transport: headers{set: set, next: srv.Client().Transport}}
	return sdk.NewClient(&sdk.Implementation{Name: "http-client", Version: "1"}, nil).Connect(context.Background(),
		&sdk.StreamableClientTransport{Endpoint: srv.URL + PathMCP, HTTPClient: hc, DisableStandaloneSSE: true, MaxRetries: -1}, nil)
}

// initialize is a raw MCP initialize request, as the first POST of any client.
func initialize(t *testing.T, srv *httptest.Server, set map[string]string) *http.Response {
	t.Helper()
	req, err := harness.NewMCPRequest(http.MethodPost, srv.URL+PathMCP, set)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func get(t *testing.T, srv *httptest.Server, path string, set map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range set {
		req.Header.Set(k, v)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func bearer(token string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + token}
}

// TestHTTPEndToEnd calls tools through the SDK's own streamable HTTP client with the token, then reads the
// calls back from /metrics.
func TestHTTPEndToEnd(t *testing.T) {
	srv := httpServer(t)
	cs, err := dial(t, srv, bearer(testToken))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "k8s_get_pod_status", Arguments: map[string]any{"namespace": "demo-app"}})
	if err != nil || res.IsError {
		t.Fatalf("call over HTTP: %v %+v", err, res)
	}
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "k8s_get_pod_status", Arguments: map[string]any{"namespace": "kube-system"}})
	if err != nil || !res.IsError {
		t.Fatalf("refused call over HTTP: %v %+v", err, res)
	}
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "terraform_apply", Arguments: map[string]any{"workspace": "k8s-demo", "plan_id": strings.Repeat("a", 64)}})
	if err != nil || res.IsError {
		t.Fatalf("apply over HTTP: %v %+v", err, res)
	}
	if err := cs.Close(); err != nil {
		t.Fatal(err)
	}

	code, body := get(t, srv, PathMetrics, bearer(testToken))
	if code != http.StatusOK {
		t.Fatalf("/metrics: HTTP %d %s", code, body)
	}
	for _, want := range []string{
		`agent_sandbox_mcp_tool_calls_total{outcome="ok",tool="k8s_get_pod_status"} 1`,
		`agent_sandbox_mcp_tool_calls_total{outcome="denied",tool="k8s_get_pod_status"} 1`,
		`agent_sandbox_mcp_tool_calls_total{outcome="approval_required",tool="terraform_apply"} 1`,
		`agent_sandbox_mcp_tool_call_duration_seconds_count{outcome="ok",tool="k8s_get_pod_status"} 1`,
		`agent_sandbox_mcp_tool_calls_in_flight{tool="k8s_get_pod_status"} 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if code, body := get(t, srv, PathHealthz, nil); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz without a token: HTTP %d %q", code, body)
	}
}

// TestHTTPRefusesWithoutToken: no token, a wrong one, or another scheme is 401, on the MCP endpoint and on
// /metrics; the SDK client cannot connect.
func TestHTTPRefusesWithoutToken(t *testing.T) {
	srv := httpServer(t)
	for name, set := range map[string]map[string]string{
		"no token":        nil,
		"wrong token":     bearer(strings.Repeat("x", len(testToken))),
		"token prefix":    bearer(testToken[:MinTokenLength]),
		"token plus more": bearer(testToken + "x"),
		"empty bearer":    {"Authorization": "Bearer "},
		"basic":           {"Authorization": "Basic " + testToken},
	} {
		t.Run(name, func(t *testing.T) {
			resp := initialize(t, srv, set)
			if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("initialize: HTTP %d, WWW-Authenticate %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
			}
			if code, _ := get(t, srv, PathMetrics, set); code != http.StatusUnauthorized {
				t.Errorf("/metrics: HTTP %d", code)
			}
		})
	}
	if cs, err := dial(t, srv, bearer("not-the-token-but-long-enough-0123456789")); err == nil {
		cs.Close()
		t.Fatal("the SDK client connected with a wrong token")
	} else if !strings.Contains(err.Error(), "401") && !strings.Contains(strings.ToLower(err.Error()), "unauthorized") {
		t.Errorf("connect with a wrong token: %v", err)
	}
}

// TestHTTPOrigin: a foreign Origin is 403 even with the right token (a page in the user's browser, or one
// DNS rebinding pointed at the server); an allowed one and none at all work.
func TestHTTPOrigin(t *testing.T) {
	srv := httpServer(t, "https://Console.Example.com")
	withOrigin := func(origin string) map[string]string {
		m := bearer(testToken)
		m["Origin"] = origin
		return m
	}
	for _, origin := range []string{"https://evil.example", "null", srv.URL, "http://console.example.com", "https://console.example.com.evil.example"} {
		resp := initialize(t, srv, withOrigin(origin))
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("Origin %s: HTTP %d, want 403", origin, resp.StatusCode)
		}
		if code, _ := get(t, srv, PathHealthz, withOrigin(origin)); code != http.StatusForbidden {
			t.Errorf("/healthz with Origin %s: HTTP %d, want 403", origin, code)
		}
	}
	if cs, err := dial(t, srv, withOrigin("https://evil.example")); err == nil {
		cs.Close()
		t.Fatal("the SDK client connected from a foreign origin")
	}
	// The allowed origin, compared as browsers send it (lower case), works end to end.
	cs, err := dial(t, srv, withOrigin("https://console.example.com"))
	if err != nil {
		t.Fatalf("allowed origin: %v", err)
	}
	if _, err := cs.ListTools(context.Background(), nil); err != nil {
		t.Errorf("list tools from the allowed origin: %v", err)
	}
	cs.Close()
	// Two Origin headers are refused.
	req, _ := http.NewRequest(http.MethodGet, srv.URL+PathHealthz, nil)
	req.Header.Add("Origin", "https://console.example.com")
	req.Header.Add("Origin", "https://evil.example")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("two Origin headers: HTTP %d", resp.StatusCode)
	}
}

func TestHTTPHandlerRefusesWeakConfig(t *testing.T) {
	s := sdk.NewServer(&sdk.Implementation{Name: "x", Version: "1"}, nil)
	if _, err := HTTPHandler(s, HTTPOptions{}); err == nil {
		t.Error("no token was accepted")
	}
	if _, err := HTTPHandler(s, HTTPOptions{Token: strings.Repeat("a", MinTokenLength-1)}); err == nil {
		t.Error("a short token was accepted")
	}
	if _, err := HTTPHandler(s, HTTPOptions{Token: testToken, AllowedOrigins: []string{"*"}}); err == nil {
		t.Error("a wildcard origin was accepted")
	}
}

func TestParseOrigin(t *testing.T) {
	for in, want := range map[string]string{
		"https://app.example.com":       "https://app.example.com",
		"HTTPS://App.Example.com:8443/": "https://app.example.com:8443",
		"http://127.0.0.1:3000":         "http://127.0.0.1:3000",
	} {
		if got, err := ParseOrigin(in); err != nil || got != want {
			t.Errorf("ParseOrigin(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"*", "null", "app.example.com", "https://", "https://app.example.com/path", "ftp://x", "https://u:p@x", "https://x?q=1", "https://x#f"} {
		if got, err := ParseOrigin(in); err == nil {
			t.Errorf("ParseOrigin(%q) = %q, want an error", in, got)
		}
	}
}
