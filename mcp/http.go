package mcp

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// The paths of the streamable HTTP server.
const (
	// PathMCP is the MCP endpoint: clients are configured with http://HOST:PORT/mcp.
	PathMCP = "/mcp"
	// PathHealthz answers 200 "ok" without a token, for liveness probes.
	PathHealthz = "/healthz"
	// PathMetrics serves the Prometheus metrics; it needs the token, like PathMCP.
	PathMetrics = "/metrics"
)

// MinTokenLength is the shortest bearer token HTTPHandler accepts: 32 characters, as many as
// `openssl rand -hex 16` prints.
const MinTokenLength = 32

// sessionIdleTimeout closes a stateful MCP session no request has used for this long, so that clients
// that vanish do not hold server memory forever.
const sessionIdleTimeout = 2 * time.Hour

// HTTPOptions secure the streamable HTTP endpoint.
type HTTPOptions struct {
	// Token is the bearer token every request to PathMCP and PathMetrics must carry
	// ("Authorization: Bearer <Token>"). It is required: the MCP endpoint can file approval requests and
	// run sandboxes, and anything that reaches the port, a web page in the user's browser included,
	// must not be able to do that.
	Token string
	// AllowedOrigins are the browser origins ("https://app.example.com", scheme://host[:port]) whose pages
	// may call the server. A request with any other Origin header is refused with 403, whatever its token:
	// this is the MCP specification's defence against DNS rebinding. Requests without an Origin header
	// (every non-browser client) are not affected.
	AllowedOrigins []string
	// Stateful keeps an MCP session per client in this process (Mcp-Session-Id, a GET stream for
	// server-initiated messages, a two-hour idle timeout), as streamable HTTP did before MCP 2026-07-28.
	// The default, stateless, serves every POST on its own: a 2026-07-28 client (server/discover,
	// per-request _meta) and an older one (initialize, then requests that the SDK serves with a session
	// made up for each request) alike, so that several replicas behind one address serve the same client
	// without session affinity. Nothing this server keeps between requests lives in a session: the
	// approval workflow is in the approvals database, progress goes out on the call's own response stream,
	// and the server sends nothing unprompted.
	Stateful bool
	// Gatherer, when set, is served on PathMetrics.
	Gatherer prometheus.Gatherer
	// Log receives one line per refused request (never the token); nil logs nothing.
	Log *slog.Logger
}

// HTTPHandler serves s over streamable HTTP on PathMCP (stateless unless o.Stateful), with PathHealthz
// and, when o.Gatherer is set, PathMetrics. Every path checks the Origin header first; PathMCP and PathMetrics then require the bearer
// token, compared in constant time.
func HTTPHandler(s *sdk.Server, o HTTPOptions) (http.Handler, error) {
	if len(o.Token) < MinTokenLength {
		return nil, fmt.Errorf("the HTTP bearer token must be at least %d characters", MinTokenLength)
	}
	origins := make(map[string]bool, len(o.AllowedOrigins))
	for _, raw := range o.AllowedOrigins {
		origin, err := ParseOrigin(raw)
		if err != nil {
			return nil, err
		}
		origins[origin] = true
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	g := &guard{origins: origins, token: sha256.Sum256([]byte(o.Token)), log: log}

	mux := http.NewServeMux()
	// A 2026-07-28 request lives exactly as long as its POST: a client cancels a call by closing it, and
	// then the call is cancelled (its sandbox Job deleted), as a cancelled call over stdio is. An older
	// client's notifications/cancelled cannot reach a stateless server's call (the SDK serves it on a
	// session of its own); such a call runs to its end, within the policy's deadline and
	// --max-concurrency.
	opts := &sdk.StreamableHTTPOptions{Logger: o.Log, Stateless: true, PropagateRequestCancellation: true}
	if o.Stateful {
		opts = &sdk.StreamableHTTPOptions{Logger: o.Log, SessionTimeout: sessionIdleTimeout}
	}
	mcpHandler := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, opts)
	mux.Handle(PathMCP, g.authenticated(mcpHandler))
	mux.HandleFunc("GET "+PathHealthz, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	if o.Gatherer != nil {
		mux.Handle("GET "+PathMetrics, g.authenticated(promhttp.HandlerFor(o.Gatherer, promhttp.HandlerOpts{})))
	}
	return g.sameOrigin(mux), nil
}

// ParseOrigin checks an allowed origin given by the operator and returns it in the form browsers send
// it: lower-case scheme and host, no path, no trailing slash.
func ParseOrigin(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("allowed origin %q: %w", raw, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("allowed origin %q: want scheme://host[:port], as a browser sends it", raw)
	}
	return strings.ToLower(u.Scheme + "://" + u.Host), nil
}

// guard holds the HTTP server's two checks.
type guard struct {
	origins map[string]bool
	token   [sha256.Size]byte
	log     *slog.Logger
}

// sameOrigin refuses a request whose Origin header names an origin that is not allowed. Browsers send
// Origin on every cross-origin request and on POSTs; a page that DNS rebinding has pointed at this server
// still sends its own origin, which is never allowed unless the operator listed it.
func (g *guard) sameOrigin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		values := r.Header.Values("Origin")
		if len(values) == 0 {
			next.ServeHTTP(w, r)
			return
		}
		if len(values) != 1 || !g.origins[strings.ToLower(values[0])] {
			g.log.Warn("mcp http request refused: origin not allowed", "origin", truncate(strings.Join(values, ","), 200), "path", r.URL.Path, "remote", r.RemoteAddr)
			http.Error(w, "Forbidden: origin not allowed", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// authenticated refuses a request without the bearer token with 401.
func (g *guard) authenticated(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := g.checkToken(r); err != nil {
			g.log.Warn("mcp http request refused: "+err.Error(), "path", r.URL.Path, "remote", r.RemoteAddr)
			w.Header().Set("WWW-Authenticate", `Bearer realm="agent-sandbox"`)
			http.Error(w, "Unauthorized: "+err.Error(), http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

var (
	errNoToken    = errors.New("no bearer token")
	errWrongToken = errors.New("wrong bearer token")
)

func (g *guard) checkToken(r *http.Request) error {
	values := r.Header.Values("Authorization")
	if len(values) != 1 {
		return errNoToken
	}
	scheme, token, ok := strings.Cut(values[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return errNoToken
	}
	// Comparing fixed-size digests keeps the comparison's time independent of the token's length too.
	got := sha256.Sum256([]byte(token))
	if subtle.ConstantTimeCompare(got[:], g.token[:]) != 1 {
		return errWrongToken
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
