package mcp

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/service"
	"github.com/agent-sandbox/agent-sandbox/test/harness"
)

// routed is one request the alternating proxy passed on.
type routed struct {
	replica  int
	methods  []string // the JSON-RPC methods of the body
	version  string   // the MCP-Protocol-Version header
	metaVer  string   // _meta["io.modelcontextprotocol/protocolVersion"] of the first request
	session  string   // the Mcp-Session-Id header the replica answered with
	httpVerb string
	status   int
}

// alternating is one listener in front of several replicas: each request goes to the next replica in
// turn, whatever session or client it belongs to (no affinity).
type alternating struct {
	replicas []http.Handler
	mu       sync.Mutex
	n        int
	log      []routed
}

func (a *alternating) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	a.mu.Lock()
	i := a.n % len(a.replicas)
	a.n++
	a.mu.Unlock()
	rec := routed{replica: i, version: r.Header.Get("Mcp-Protocol-Version"), httpVerb: r.Method}
	rec.methods, _, rec.metaVer = harness.PeekRPC(body)
	sw := harness.NewStatusRecorder(w)
	a.replicas[i].ServeHTTP(sw, r)
	rec.session, rec.status = w.Header().Get("Mcp-Session-Id"), sw.Status
	a.mu.Lock()
	a.log = append(a.log, rec)
	a.mu.Unlock()
}

func (a *alternating) routed() []routed {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.log)
}

// TestHTTPStatelessReplicasServeOneClient: two stateless servers that share nothing, behind one listener
// that sends each request to the next one in turn, serve a 2026-07-28 client (server/discover, per-request
// _meta, no session) and a 2025-11-25 client (initialize, then every request on its own): tools/list,
// a call with its progress notifications, the approval_required answer. Both replicas serve each client,
// no response names a session, and every call counts against the one HTTP client ("http").
func TestHTTPStatelessReplicasServeOneClient(t *testing.T) {
	for _, tc := range []struct {
		name, offer, want string
	}{
		{"2026-07-28", "", ProtocolVersion20260728},
		{"2025-11-25", ProtocolVersion20251125, ProtocolVersion20251125},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h0, svc0 := httpHandler(t, HTTPOptions{})
			h1, svc1 := httpHandler(t, HTTPOptions{})
			lb := &alternating{replicas: []http.Handler{h0, h1}}
			srv := httptest.NewServer(lb)
			defer srv.Close()
			ctx := context.Background()

			c, err := DialHTTPVersion(ctx, srv.URL+PathMCP, testToken, tc.offer)
			if err != nil {
				t.Fatal(err)
			}
			if got := c.ProtocolVersion(); got != tc.want {
				t.Errorf("agreed protocol version %q, want %q", got, tc.want)
			}
			var mu sync.Mutex
			var stages []string
			c.OnProgress = func(msg string, _, _ float64) {
				mu.Lock()
				defer mu.Unlock()
				stages = append(stages, msg)
			}
			if names, err := c.ToolNames(ctx); err != nil || !slices.Contains(names, "terraform_apply") {
				t.Fatalf("tools/list through the replicas: %v %v", names, err)
			}
			res, err := c.Call(ctx, "k8s_get_pod_status", map[string]any{"namespace": "demo-app"})
			if err != nil || res.IsError || !strings.Contains(string(res.Structured), `"web-1"`) {
				t.Fatalf("k8s_get_pod_status: %v %+v", err, res)
			}
			res, err = c.Call(ctx, "terraform_apply", map[string]any{"workspace": "k8s-demo", "plan_id": strings.Repeat("a", 64)})
			var apply service.ApplyOutput
			if err == nil {
				err = res.Decode(&apply)
			}
			if err != nil || apply.Status != service.StatusApprovalRequired {
				t.Fatalf("terraform_apply: %v %+v", err, res)
			}
			if err := c.Close(); err != nil {
				t.Error(err)
			}
			mu.Lock()
			// Each call's stages, from the replica that served it, on that call's own response stream.
			if one := "queued,admitted,credentials ready,running,done"; strings.Join(stages, ",") != one+","+one {
				t.Errorf("progress stages %q, want those of two calls", stages)
			}
			mu.Unlock()

			srv.Close() // every request answered and logged
			checkRouting(t, lb.routed(), tc.want)
			calls := 0
			for i, svc := range []*fakeService{svc0, svc1} {
				svc.mu.Lock()
				calls += len(svc.clients)
				for _, cl := range svc.clients {
					if cl != "http" {
						t.Errorf("replica %d counted a call against client %q, want http", i, cl)
					}
				}
				svc.mu.Unlock()
			}
			if calls != 2 {
				t.Errorf("the replicas served %d tool calls, want 2", calls)
			}
		})
	}
}

// checkRouting checks what went through the proxy: both replicas answered, none with a session, every
// request as the protocol version prescribes.
func checkRouting(t *testing.T, log []routed, version string) {
	t.Helper()
	served := map[int]bool{}
	var methods []string
	for _, r := range log {
		served[r.replica] = true
		methods = append(methods, r.methods...)
		if r.session != "" {
			t.Errorf("replica %d answered %s with session %q", r.replica, r.methods, r.session)
		}
		// An older client opens a GET stream for messages the server might send unprompted; a stateless
		// server has none and answers 405, which the client takes as "no stream" (this server never sends
		// anything unprompted anyway).
		if r.httpVerb == http.MethodGet && r.status == http.StatusMethodNotAllowed {
			continue
		}
		if r.status >= 400 {
			t.Errorf("replica %d answered %s %s with HTTP %d", r.replica, r.httpVerb, r.methods, r.status)
		}
		if version == ProtocolVersion20260728 && slices.Contains(r.methods, "tools/call") && r.metaVer != version {
			t.Errorf("a 2026-07-28 tools/call carried _meta protocol version %q", r.metaVer)
		}
	}
	if !served[0] || !served[1] {
		t.Errorf("replicas served: %v; want both", served)
	}
	switch version {
	case ProtocolVersion20260728:
		if !slices.Contains(methods, "server/discover") || slices.Contains(methods, "initialize") {
			t.Errorf("a 2026-07-28 client sent %v; want server/discover and no initialize", methods)
		}
	default:
		if !slices.Contains(methods, "initialize") || slices.Contains(methods, "server/discover") {
			t.Errorf("a %s client sent %v; want initialize and no server/discover", version, methods)
		}
		for _, r := range log {
			if !slices.Contains(r.methods, "initialize") && r.httpVerb == http.MethodPost && r.version != version {
				t.Errorf("%s went with MCP-Protocol-Version %q, want %s", r.methods, r.version, version)
			}
		}
	}
}

// TestHTTPStatefulNeedsAffinity is why stateless is the default: stateful servers behind the same
// alternating listener lose the client's session at its second request, which the other replica never
// heard of.
func TestHTTPStatefulNeedsAffinity(t *testing.T) {
	h0, _ := httpHandler(t, HTTPOptions{Stateful: true})
	h1, _ := httpHandler(t, HTTPOptions{Stateful: true})
	lb := &alternating{replicas: []http.Handler{h0, h1}}
	srv := httptest.NewServer(lb)
	defer srv.Close()
	ctx := context.Background()
	// A 2025-11-25 client without the background GET stream: its handshake makes exactly one session,
	// which the test can end (a 2026-07-28 client would first try server/discover, and the GET stream
	// could reach a replica after the clean-up).
	hc := &http.Client{Transport: headers{set: bearer(testToken), next: srv.Client().Transport}}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "http-client", Version: "1"}, nil).Connect(ctx,
		&sdk.StreamableClientTransport{Endpoint: srv.URL + PathMCP, HTTPClient: hc, DisableStandaloneSSE: true, MaxRetries: -1},
		&sdk.ClientSessionOptions{ProtocolVersion: ProtocolVersion20251125})
	if err == nil {
		_, err = cs.ListTools(ctx, nil)
		cs.Close()
	}
	// The session lives on in the replica that made it; end it there, once every request has been
	// answered and logged (Close waits for them).
	srv.Close()
	for _, r := range lb.routed() {
		if r.session != "" {
			req := httptest.NewRequest(http.MethodDelete, PathMCP, nil)
			req.Header.Set("Authorization", "Bearer "+testToken)
			req.Header.Set("Mcp-Session-Id", r.session)
			lb.replicas[r.replica].ServeHTTP(httptest.NewRecorder(), req)
		}
	}
	if err == nil {
		t.Fatal("a stateful session survived requests alternating between two replicas")
	}
	t.Logf("stateful, alternating: %v", err)
}

// TestHTTPStatefulClientIsTheSession: a stateful server counts each session as its own client, and still
// serves a 2026-07-28 client, which falls back to initialize.
func TestHTTPStatefulClientIsTheSession(t *testing.T) {
	h, svc := httpHandler(t, HTTPOptions{Stateful: true})
	srv := httptest.NewServer(h)
	defer srv.Close()
	ctx := context.Background()
	c, err := DialHTTP(ctx, srv.URL+PathMCP, testToken)
	if err != nil {
		t.Fatal(err)
	}
	if v := c.ProtocolVersion(); v != ProtocolVersion20251125 {
		t.Errorf("a stateful server agreed on %q, want %s", v, ProtocolVersion20251125)
	}
	if _, err := c.Call(ctx, "k8s_get_pod_status", map[string]any{"namespace": "demo-app"}); err != nil {
		t.Fatal(err)
	}
	c.Close()
	svc.mu.Lock()
	defer svc.mu.Unlock()
	if len(svc.clients) != 1 || !strings.HasPrefix(svc.clients[0], "http:") || len(svc.clients[0]) < len("http:")+8 {
		t.Errorf("clients %q, want one http:<session ID>", svc.clients)
	}
}

// blockingService holds each call until its context ends or the test releases it, and says which.
type blockingService struct {
	fakeService
	started chan struct{}
	release chan struct{}
	ended   chan string
}

func (b *blockingService) Call(ctx context.Context, _ string, _ map[string]any, _ service.Progress) (any, error) {
	b.started <- struct{}{}
	select {
	case <-ctx.Done():
		b.ended <- "cancelled"
	case <-b.release:
		b.ended <- "released"
	}
	return map[string]any{"request_id": "req-bbbbbbbbbbbb"}, nil
}

// TestHTTPCancelledCall: a client that gives up on a call cancels it (the service's context ends, so the
// sandbox Job is deleted) when the server can hear it: a 2026-07-28 client on a stateless server, by
// closing the call's POST, and a session's client on a stateful one, by notifications/cancelled.
func TestHTTPCancelledCall(t *testing.T) {
	for _, tc := range []struct {
		name     string
		stateful bool
		offer    string
	}{
		{"stateless 2026-07-28", false, ""},
		{"stateful 2025-11-25", true, ProtocolVersion20251125},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := policy.LoadFile("../policy/policy.yaml")
			if err != nil {
				t.Fatal(err)
			}
			svc := &blockingService{fakeService: fakeService{p: p}, started: make(chan struct{}, 1), release: make(chan struct{}), ended: make(chan string, 1)}
			server, err := NewServer(svc, "test", nil)
			if err != nil {
				t.Fatal(err)
			}
			h, err := HTTPHandler(server, HTTPOptions{Token: testToken, Stateful: tc.stateful})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(h)
			defer srv.Close()
			c, err := DialHTTPVersion(context.Background(), srv.URL+PathMCP, testToken, tc.offer)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithCancel(context.Background())
			go func() {
				<-svc.started
				cancel()
			}()
			if _, err := c.Call(ctx, "k8s_get_pod_status", map[string]any{"namespace": "demo-app"}); err == nil {
				t.Error("the cancelled call returned a result")
			}
			// A guard, not a deadline: only a call the server never cancels is released, so that the test
			// fails instead of hanging.
			got := ""
			select {
			case got = <-svc.ended:
			case <-time.After(time.Minute):
				close(svc.release)
				got = <-svc.ended
			}
			if got != "cancelled" {
				t.Errorf("the server's call was %s, not cancelled", got)
			}
		})
	}
}
