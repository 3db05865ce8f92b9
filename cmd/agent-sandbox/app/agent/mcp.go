package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/cli"
	approvalstore "github.com/agent-sandbox/agent-sandbox/internal/approval/store"
	"github.com/agent-sandbox/agent-sandbox/internal/audit"
	"github.com/agent-sandbox/agent-sandbox/internal/instance"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/service"
	"github.com/agent-sandbox/agent-sandbox/internal/telemetry"
	"github.com/agent-sandbox/agent-sandbox/mcp"
)

// mcpOptions are the flags of `agent-sandbox mcp`.
type mcpOptions struct {
	PolicyFile     string
	Kubeconfig     string
	DB             string
	AuditLog       string
	Workspaces     string
	MaxConcurrency int
	Warm           bool
	HTTPAddr       string
	HTTPTokenFile  string
	HTTPStateful   bool
	AllowedOrigins []string
	LogLevel       string
	OTLPEndpoint   string
	// MaxMessageBytes and MaxMessageDepth bound one JSON-RPC message read over stdio.
	MaxMessageBytes int
	MaxMessageDepth int
	// Audit bounds what the agent can make the server write to the audit log.
	Audit service.AuditLimits

	httpToken string
	// otlpURL is where traces go, resolved from --otlp-endpoint or the environment ("" = tracing off).
	otlpURL  string
	logLevel slog.Level
	paths    clientPaths
	// version is the build's version, which the server reports to clients and stamps on traces.
	version string
	streams cli.IO
}

// NewMCPCommand builds `agent-sandbox mcp`; version is the build's version (the root's version command
// prints it), reported to MCP clients and on traces.
func NewMCPCommand(streams cli.IO, version string) *cobra.Command {
	o := &mcpOptions{paths: newClientPaths(), version: version, streams: streams}
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve the agent-sandbox tools to an MCP client (Claude, Cursor, ...) over stdio or streamable HTTP",
		Long: `Serve the policy's tools to an AI agent over the Model Context Protocol: stdio by default (nothing
but protocol is written to stdout; logs go to stderr), or streamable HTTP with --http.

Over HTTP the MCP endpoint is http://ADDRESS/mcp, served stateless (MCP 2026-07-28): every request is
served on its own, without a session, so several servers behind one address (a plain load balancer, no
session affinity) serve the same client, provided they share the approvals database and the audit log
(--db, --audit-log: on one host, the same files). 2026-07-28 clients discover the server; older ones
(2025-11-25 and before) initialize as they always did and are served the same. Progress notifications
travel on each call's own response stream. A call that waits for a human's approval is resumed by
calling again, on any server: the request and the grant are in the approvals database. A 2026-07-28
client that closes a call's request cancels the call. --http-stateful restores MCP sessions
(Mcp-Session-Id): each client is then bound to one server, and 2026-07-28 clients fall back to
2025-11-25.

Every HTTP request to /mcp must carry the bearer token of --http-token-file, or of
$AGENT_SANDBOX_HTTP_TOKEN ("Authorization: Bearer <token>", at least 32 characters, compared in
constant time). The server refuses to start without a token, on any address,
and names a non-loopback address in its refusal. A request whose Origin header is not one of
--http-allowed-origin is refused with 403 whatever its token, so a web page in your browser cannot
drive the server; clients that send no Origin (every non-browser client) are unaffected.
GET /healthz answers "ok" without a token; GET /metrics serves Prometheus metrics (tool calls by tool
and outcome, their durations, calls in flight) and needs the token. The server speaks plain HTTP: to
serve beyond this machine, put a TLS-terminating proxy in front of it.

With --otlp-endpoint (or $OTEL_EXPORTER_OTLP_ENDPOINT, or $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) the
server exports an OpenTelemetry trace of every tool call over OTLP/HTTP, in stdio and HTTP mode alike:
one span for the call and child spans for admission, Pod start, the credential (issue to revoke), the
run and the clean-up. The trace ID is the first 16 bytes of SHA-256("agent-sandbox/" + request ID), so
the request ID in the audit log finds the trace. Without an endpoint nothing is traced.

Every call runs as one gVisor sandbox Job in the cluster of --kubeconfig; the server needs only a
kubeconfig limited to the sandbox namespace (create Jobs and ConfigMaps, read Jobs, Pods and logs).
'agent-sandbox kubeconfig refresh' writes one, and 'make install-client' installs this binary, the
policy and the demo workspace, so that a client configuration needs no flag at all:

  --kubeconfig  ~/.config/agent-sandbox/mcp.kubeconfig if it exists, else $KUBECONFIG
  --policy      $AGENT_SANDBOX_POLICY, else ~/.config/agent-sandbox/policy.yaml, else ./policy/policy.yaml
  --workspaces  $AGENT_SANDBOX_WORKSPACES, else ~/.config/agent-sandbox/workspaces, else ./terraform

(~/.config is $XDG_CONFIG_HOME when that is set.) A missing default is an error that names every path
it tried.
terraform_apply waits for a human's approval, made with 'agent-sandbox approve' in a terminal; no tool
can approve. Every call is written to the hash-chained audit log.`,
		Example: `  # after sudo make deploy && make install-client: everything from ~/.config/agent-sandbox
  agent-sandbox mcp
  claude mcp add agent-sandbox -- agent-sandbox mcp

  # a checkout of the repository and a kubeconfig elsewhere
  agent-sandbox mcp --policy policy/policy.yaml --workspaces terraform --kubeconfig ~/.kube/agent-sandbox-mcp.kubeconfig

  # streamable HTTP on loopback, with a token only you can read
  (umask 077; openssl rand -hex 32 > ~/.config/agent-sandbox/http-token)
  agent-sandbox mcp --http 127.0.0.1:8765 --http-token-file ~/.config/agent-sandbox/http-token`,
		Args: cli.Usage(cobra.NoArgs),
		RunE: cli.RunE(o),
	}
	f := cmd.Flags()
	f.StringVar(&o.PolicyFile, "policy", "", "policy file, the same policy the webhook enforces [default $AGENT_SANDBOX_POLICY, else ~/.config/agent-sandbox/policy.yaml, else ./policy/policy.yaml]")
	f.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig limited to the sandbox namespace [default ~/.config/agent-sandbox/mcp.kubeconfig if it exists, else $KUBECONFIG]")
	f.StringVar(&o.DB, "db", "", "approvals database [$AGENT_SANDBOX_DB, default ~/.local/state/agent-sandbox/approvals.db]")
	f.StringVar(&o.AuditLog, "audit-log", "", "audit log [$AGENT_SANDBOX_AUDIT_LOG, default ~/.local/state/agent-sandbox/audit.jsonl]")
	f.StringVar(&o.Workspaces, "workspaces", "", "folder with one sub-folder of Terraform files per workspace [default $AGENT_SANDBOX_WORKSPACES, else ~/.config/agent-sandbox/workspaces, else ./terraform]")
	f.IntVar(&o.MaxConcurrency, "max-concurrency", 4, "sandboxes that may run at once")
	f.BoolVar(&o.Warm, "warm", true, "claim a ready warm Pod for tools whose policy declares a warm pool; without one (or with --warm=false) the call runs as a cold Job")
	f.StringVar(&o.HTTPAddr, "http", "", "serve streamable HTTP on this address (e.g. 127.0.0.1:8765; MCP endpoint /mcp) instead of stdio")
	f.StringVar(&o.HTTPTokenFile, "http-token-file", os.Getenv("AGENT_SANDBOX_HTTP_TOKEN_FILE"), "file holding the bearer token HTTP clients must send; --http needs it or $"+EnvHTTPToken+" [$AGENT_SANDBOX_HTTP_TOKEN_FILE]")
	f.BoolVar(&o.HTTPStateful, "http-stateful", false, "serve HTTP with MCP sessions (Mcp-Session-Id), as before MCP 2026-07-28: each client is bound to this one server, and 2026-07-28 clients fall back to 2025-11-25 (default: stateless, any server behind one address serves any request)")
	f.StringSliceVar(&o.AllowedOrigins, "http-allowed-origin", nil, "browser origin (scheme://host[:port]) allowed to call the HTTP server; repeatable (default: none, only clients that send no Origin)")
	f.StringVar(&o.LogLevel, "log-level", "info", cli.LogLevelHelp+" (logs go to stderr)")
	f.IntVar(&o.MaxMessageBytes, "max-message-bytes", mcp.DefaultMaxMessageBytes, "stdio: the longest JSON-RPC message (one line) the server reads; a longer one is answered with an invalid-request error and the server goes on serving")
	f.IntVar(&o.MaxMessageDepth, "max-message-depth", mcp.DefaultMaxMessageDepth, "stdio: the deepest nesting of objects and arrays in one JSON-RPC message; a deeper one is answered with an invalid-request error")
	f.IntVar(&o.Audit.ParamBytes, "audit-param-bytes", service.DefaultAuditParamBytes, "the longest value of one tool-call argument the audit log records; a longer one is recorded as its size and SHA-256, marked truncated")
	f.IntVar(&o.Audit.ParamsBytes, "audit-params-bytes", service.DefaultAuditParamsBytes, "the most JSON of one call's arguments the audit log records; more is recorded as its size and SHA-256, marked truncated")
	f.Int64Var(&o.Audit.ClientBytes, "audit-client-bytes", service.DefaultAuditClientBytes, "audit bytes one MCP client (the stdio client; over HTTP all token holders together, or one session with --http-stateful) may make the server write per --audit-window; past it calls are refused with a tool error until the window resets (-1: no limit)")
	f.Int64Var(&o.Audit.TotalBytes, "audit-total-bytes", service.DefaultAuditTotalBytes, "audit bytes all MCP clients together may make the server write per --audit-window (-1: no limit)")
	f.DurationVar(&o.Audit.Window, "audit-window", service.DefaultAuditWindow, "the window of --audit-client-bytes and --audit-total-bytes")
	f.StringVar(&o.OTLPEndpoint, "otlp-endpoint", "", "export OpenTelemetry traces of every tool call to this OTLP/HTTP collector (e.g. http://127.0.0.1:4318; a URL with a path is the full traces URL) [default $"+telemetry.EnvEndpoint+" or $"+telemetry.EnvTracesEndpoint+"; none: no tracing]")
	return cmd
}

// Complete fills the default paths. A default that does not exist is a not-found error naming every path
// tried.
func (o *mcpOptions) Complete() error {
	if o.paths.getenv == nil {
		o.paths = newClientPaths()
	}
	var errs []error
	var err error
	if o.PolicyFile, err = o.paths.policy(o.PolicyFile); err != nil {
		errs = append(errs, err)
	}
	if o.Workspaces, err = o.paths.workspaces(o.Workspaces); err != nil {
		errs = append(errs, err)
	}
	if o.Kubeconfig, err = o.paths.mcpKubeconfig(o.Kubeconfig); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return cli.NotFoundError{Err: err}
	}
	if o.DB == "" {
		if o.DB, err = approvalstore.DefaultDBPath(); err != nil {
			return err
		}
	}
	if o.AuditLog == "" {
		o.AuditLog = audit.DefaultPath()
	}
	return nil
}

// Validate reports every problem with the flags at once.
func (o *mcpOptions) Validate() error {
	var errs []error
	if o.MaxConcurrency < 1 {
		errs = append(errs, errors.New("--max-concurrency must be at least 1"))
	}
	if o.MaxMessageBytes < 1024 || o.MaxMessageDepth < 8 {
		errs = append(errs, errors.New("--max-message-bytes must be at least 1024 and --max-message-depth at least 8 (an MCP initialize message needs that much)"))
	}
	if a := o.Audit; a.ParamBytes < 64 || a.ParamsBytes < a.ParamBytes || a.ClientBytes == 0 || a.ClientBytes < -1 || a.TotalBytes == 0 || a.TotalBytes < -1 || a.Window < time.Second {
		errs = append(errs, errors.New("--audit-param-bytes must be at least 64 and --audit-params-bytes at least that, --audit-client-bytes and --audit-total-bytes positive or -1, --audit-window at least 1s"))
	}
	if st, err := os.Stat(o.Workspaces); err != nil || !st.IsDir() {
		errs = append(errs, fmt.Errorf("--workspaces %s is not a folder", o.Workspaces))
	}
	level, err := cli.ParseLogLevel(o.LogLevel)
	if err != nil {
		errs = append(errs, err)
	}
	o.logLevel = level
	if o.otlpURL, err = (telemetry.Options{Endpoint: o.OTLPEndpoint}).ResolveEndpoint(); err != nil {
		errs = append(errs, err)
	}
	if o.HTTPAddr != "" {
		errs = append(errs, o.validateHTTP()...)
	} else if o.HTTPTokenFile != "" || len(o.AllowedOrigins) > 0 || o.HTTPStateful {
		errs = append(errs, errors.New("--http-token-file, --http-allowed-origin and --http-stateful need --http"))
	}
	return errors.Join(errs...)
}

// validateHTTP checks the HTTP flags and reads the token. The streamable HTTP endpoint always needs a
// token: on loopback any local process and any web page the user opens can reach it, and beyond loopback
// anyone on the network can.
func (o *mcpOptions) validateHTTP() []error {
	var errs []error
	host, _, err := net.SplitHostPort(o.HTTPAddr)
	if err != nil {
		errs = append(errs, fmt.Errorf("--http %q: %v", o.HTTPAddr, err))
	}
	envToken, fromEnv := os.LookupEnv(EnvHTTPToken)
	switch {
	case o.HTTPTokenFile != "" && fromEnv:
		errs = append(errs, fmt.Errorf("--http-token-file and $%s both give a token: unset one", EnvHTTPToken))
	case o.HTTPTokenFile != "":
		if o.httpToken, err = readHTTPToken(o.HTTPTokenFile); err != nil {
			errs = append(errs, err)
		}
	case fromEnv:
		if o.httpToken, err = checkHTTPToken(envToken); err != nil {
			errs = append(errs, fmt.Errorf("$%s: %w", EnvHTTPToken, err))
		}
	case err == nil && !isLoopback(host):
		errs = append(errs, fmt.Errorf("refusing to serve MCP on %s, a non-loopback address, without authentication: pass --http-token-file or set $%s", o.HTTPAddr, EnvHTTPToken))
	default:
		errs = append(errs, fmt.Errorf("--http needs --http-token-file or $%s: every HTTP client must present that bearer token", EnvHTTPToken))
	}
	for _, origin := range o.AllowedOrigins {
		if _, err := mcp.ParseOrigin(origin); err != nil {
			errs = append(errs, fmt.Errorf("--http-allowed-origin: %w", err))
		}
	}
	return errs
}

// isLoopback reports whether a listen host is a loopback address. An empty host listens on every
// interface; a name other than localhost may resolve to anything.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// EnvHTTPToken holds the HTTP bearer token itself, for service managers that inject secrets as
// environment variables; --http-token-file is preferred, since a file's mode protects it and the
// environment of a process is readable by its children.
const EnvHTTPToken = "AGENT_SANDBOX_HTTP_TOKEN"

// readHTTPToken reads the bearer token from a file.
func readHTTPToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--http-token-file: %w", err)
	}
	token, err := checkHTTPToken(string(b))
	if err != nil {
		return "", fmt.Errorf("--http-token-file %s: %w", path, err)
	}
	return token, nil
}

// checkHTTPToken trims surrounding white space and requires one word of at least mcp.MinTokenLength
// printable ASCII characters, the characters an HTTP header carries unchanged.
func checkHTTPToken(raw string) (string, error) {
	token := strings.TrimSpace(raw)
	ok := len(token) >= mcp.MinTokenLength
	for i := 0; ok && i < len(token); i++ {
		ok = token[i] > ' ' && token[i] < 0x7f
	}
	if !ok {
		return "", fmt.Errorf("the token must be one word of at least %d printable ASCII characters (make one with: openssl rand -hex 32)", mcp.MinTokenLength)
	}
	return token, nil
}

// Run wires the server and serves until the client goes away or ctx ends.
func (o *mcpOptions) Run(ctx context.Context) error {
	log := slog.New(slog.NewJSONHandler(o.streams.ErrOut, &slog.HandlerOptions{Level: o.logLevel}))

	// The server renders Jobs and checks calls against the policy; the admission rules are the webhook's.
	p, err := policy.LoadFile(o.PolicyFile, policy.WithoutAdmissionRules())
	if err != nil {
		return err
	}
	cfg, cs, logStreams, err := kubeClients(o.Kubeconfig)
	if err != nil {
		return err
	}
	store, err := approvalstore.Open(o.DB)
	if err != nil {
		return err
	}
	defer store.Close()
	auditLog, err := audit.Open(o.AuditLog)
	if err != nil {
		return err
	}
	defer auditLog.Close()
	// This process's liveness mark, beside the audit log: a server started after this one was killed finds
	// its open calls and closes them (Service.Recover).
	serversDir := filepath.Join(filepath.Dir(o.AuditLog), "servers")
	inst, err := instance.Start(serversDir)
	if err != nil {
		return err
	}
	defer inst.Close()

	tracer, stopTracing, err := telemetry.Setup(ctx, telemetry.Options{Endpoint: o.otlpURL, Version: o.version})
	if err != nil {
		return err
	}
	defer func() {
		// The last calls' spans are flushed on the way out, for a bounded time: an unreachable collector must
		// not keep the server from exiting.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := stopTracing(sctx); err != nil {
			log.Warn("flushing traces", "error", err.Error())
		}
	}()

	ns := p.Spec.Sandbox.Namespace
	runner := sandbox.NewRunner(cs, ns, o.MaxConcurrency)
	runner.Streams = logStreams
	svc := &service.Service{
		Policy: p, Approvals: store, Audit: auditLog,
		Runner:       runner,
		Workspaces:   &sandbox.Workspaces{Client: cs, Namespace: ns},
		WorkspaceDir: o.Workspaces,
		Warm:         o.Warm,
		Instance:     inst.ID,
		Tracer:       tracer,
		AuditLimits:  o.Audit,
		OnAuditError: func(requestID string, err error) {
			log.Error("audit events of a call could not be written; the audit log has a gap", "requestID", requestID, "error", err.Error())
		},
	}
	// In the background: a client waits for no cluster call before the server answers.
	go recoverAbandoned(ctx, log, svc, runner, serversDir)
	ready := func() {
		log.Info("agent-sandbox MCP server ready", "policy", p.Metadata.Name, "policyVersion", p.Version, "cluster", cfg.Host,
			"sandboxNamespace", ns, "policyFile", o.PolicyFile, "kubeconfig", o.Kubeconfig, "workspaces", o.Workspaces, "auditLog", o.AuditLog, "approvalsDB", o.DB, "transport", map[bool]string{true: "http", false: "stdio"}[o.HTTPAddr != ""],
			"otlpEndpoint", o.otlpURL, "version", o.version)
	}
	if o.HTTPAddr == "" {
		ready()
		server, err := mcp.NewServer(svc, o.version, log)
		if err != nil {
			return err
		}
		return mcp.RunStdio(ctx, server, mcp.StdioLimits{MaxMessageBytes: o.MaxMessageBytes, MaxDepth: o.MaxMessageDepth})
	}

	return o.serveMCPHTTP(ctx, svc, log, ready)
}

// kubeClients builds the server's two Kubernetes clients from a kubeconfig: one for requests, with a
// timeout and a rate fit for following running sandboxes, and one for log streams, which the call's own
// deadline bounds instead of a request timeout.
func kubeClients(kubeconfig string) (cfg *rest.Config, cs, logStreams *kubernetes.Clientset, err error) {
	cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	cfg.Timeout = 30 * time.Second
	// Each running sandbox is created, listed, watched, streamed and collected, and every request is tried
	// again while the API server restarts; client-go's default of 5 per second would queue concurrent calls'
	// requests and add whole seconds to every call.
	cfg.QPS, cfg.Burst = 50, 100
	cs, err = kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	// Log streams last as long as a call; the call's own deadline bounds them, not a request timeout.
	streamCfg := rest.CopyConfig(cfg)
	streamCfg.Timeout = 0
	logStreams, err = kubernetes.NewForConfig(streamCfg)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return cfg, cs, logStreams, nil
}

// recoverAbandoned closes the calls left open by servers that stopped (their liveness mark in serversDir
// is gone), and logs what it closed.
func recoverAbandoned(ctx context.Context, log *slog.Logger, svc *service.Service, runner *sandbox.Runner, serversDir string) {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	rec, err := svc.Recover(rctx, runner, func(id string) bool { return instance.Alive(serversDir, id) })
	for _, r := range rec {
		log.Info("closed a call abandoned by a stopped server", "requestID", r.RequestID, "tool", r.Tool, "jobsDeleted", r.Jobs)
	}
	if err != nil {
		log.Warn("recovering abandoned calls", "error", err.Error())
	}
}

// serveMCPHTTP serves MCP over streamable HTTP on --http, with the service instrumented and its metrics
// exposed; ready is called once the address is bound.
func (o *mcpOptions) serveMCPHTTP(ctx context.Context, svc *service.Service, log *slog.Logger, ready func()) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics, err := mcp.NewMetrics(reg)
	if err != nil {
		return err
	}
	server, err := mcp.NewServer(mcp.Instrument(svc, metrics), o.version, log)
	if err != nil {
		return err
	}
	handler, err := mcp.HTTPHandler(server,
		mcp.HTTPOptions{Token: o.httpToken, AllowedOrigins: o.AllowedOrigins, Stateful: o.HTTPStateful, Gatherer: reg, Log: log})
	if err != nil {
		return err
	}
	return serveHTTP(ctx, o.HTTPAddr, handler, func(addr string) {
		ready()
		log.Info("serving MCP over streamable HTTP", "endpoint", "http://"+addr+mcp.PathMCP, "stateless", !o.HTTPStateful, "allowedOrigins", o.AllowedOrigins)
	})
}

// serveHTTP listens on addr and serves h until ctx ends; listening calls back with the bound address.
func serveHTTP(ctx context.Context, addr string, h http.Handler, listening func(addr string)) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	listening(l.Addr().String())
	err = srv.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		<-stopped
		return nil
	}
	return err
}
