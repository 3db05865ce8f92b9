package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/audit"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/service"
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
	LogLevel       string
}

func newMCPCommand(streams IO) *cobra.Command {
	o := &mcpOptions{}
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve the agent-sandbox tools to an MCP client (Claude, Cursor, ...) over stdio",
		Long: `Serve the policy's tools to an AI agent over the Model Context Protocol: stdio by default (nothing
but protocol is written to stdout; logs go to stderr), or streamable HTTP with --http.

Every call runs as one gVisor sandbox Job in the cluster of --kubeconfig; the server needs only a
kubeconfig limited to the sandbox namespace (create Jobs and ConfigMaps, read Jobs, Pods and logs).
terraform_apply waits for a human's approval, made with 'agent-sandbox approve' in a terminal; no tool
can approve. Every call is written to the hash-chained audit log.`,
		Example: `  agent-sandbox mcp --policy policy/policy.yaml --kubeconfig ~/.kube/agent-sandbox-mcp.kubeconfig
  claude mcp add agent-sandbox -- agent-sandbox mcp --kubeconfig ~/.kube/agent-sandbox-mcp.kubeconfig`,
		Args: usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Complete(); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context(), streams)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.PolicyFile, "policy", envOr("AGENT_SANDBOX_POLICY", "policy/policy.yaml"), "policy file (the same policy the webhook enforces) [$AGENT_SANDBOX_POLICY]")
	f.StringVar(&o.Kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig limited to the sandbox namespace [$KUBECONFIG]")
	f.StringVar(&o.DB, "db", "", "approvals database [$AGENT_SANDBOX_DB, default ~/.local/state/agent-sandbox/approvals.db]")
	f.StringVar(&o.AuditLog, "audit-log", "", "audit log [$AGENT_SANDBOX_AUDIT_LOG, default ~/.local/state/agent-sandbox/audit.jsonl]")
	f.StringVar(&o.Workspaces, "workspaces", envOr("AGENT_SANDBOX_WORKSPACES", "terraform"), "folder with one sub-folder of Terraform files per workspace [$AGENT_SANDBOX_WORKSPACES]")
	f.IntVar(&o.MaxConcurrency, "max-concurrency", 4, "sandboxes that may run at once")
	f.BoolVar(&o.Warm, "warm", true, "claim a ready warm Pod for tools whose policy declares a warm pool; without one (or with --warm=false) the call runs as a cold Job")
	f.StringVar(&o.HTTPAddr, "http", "", "serve streamable HTTP on this address (e.g. 127.0.0.1:8765) instead of stdio")
	f.StringVar(&o.LogLevel, "log-level", "info", "debug, info or error (logs go to stderr)")
	return cmd
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// Complete fills the default paths.
func (o *mcpOptions) Complete() error {
	var err error
	if o.DB == "" {
		if o.DB, err = approval.DefaultDBPath(); err != nil {
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
	if o.Kubeconfig == "" {
		errs = append(errs, errors.New("--kubeconfig (or $KUBECONFIG) is required: the server needs the sandbox namespace's credentials"))
	}
	if o.MaxConcurrency < 1 {
		errs = append(errs, errors.New("--max-concurrency must be at least 1"))
	}
	if st, err := os.Stat(o.Workspaces); err != nil || !st.IsDir() {
		errs = append(errs, fmt.Errorf("--workspaces %s is not a folder", o.Workspaces))
	}
	if o.HTTPAddr != "" {
		if _, _, err := net.SplitHostPort(o.HTTPAddr); err != nil {
			errs = append(errs, fmt.Errorf("--http %q: %v", o.HTTPAddr, err))
		}
	}
	return errors.Join(errs...)
}

// Run wires the server and serves until the client goes away or ctx ends.
func (o *mcpOptions) Run(ctx context.Context, streams IO) error {
	level := slog.LevelInfo
	_ = level.UnmarshalText([]byte(o.LogLevel))
	log := slog.New(slog.NewJSONHandler(streams.ErrOut, &slog.HandlerOptions{Level: level}))

	// The server renders Jobs and checks calls against the policy; the admission rules are the webhook's.
	p, err := policy.LoadFile(o.PolicyFile, policy.WithoutAdmissionRules())
	if err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig %s: %w", o.Kubeconfig, err)
	}
	cfg.Timeout = 30 * time.Second
	// Each running sandbox is followed with a few requests a second; client-go's default of 5 per second
	// would queue them and add whole seconds to every call.
	cfg.QPS, cfg.Burst = 50, 100
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	store, err := approval.OpenStore(o.DB)
	if err != nil {
		return err
	}
	defer store.Close()
	auditLog, err := audit.Open(o.AuditLog)
	if err != nil {
		return err
	}
	defer auditLog.Close()

	ns := p.Spec.Sandbox.Namespace
	svc := &service.Service{
		Policy: p, Approvals: store, Audit: auditLog,
		Runner:       sandbox.NewRunner(cs, ns, o.MaxConcurrency),
		Workspaces:   &sandbox.Workspaces{Client: cs, Namespace: ns},
		WorkspaceDir: o.Workspaces,
		Warm:         o.Warm,
	}
	server, err := mcp.NewServer(svc, version, log)
	if err != nil {
		return err
	}
	log.Info("agent-sandbox MCP server ready", "policy", p.Metadata.Name, "policyVersion", p.Version, "cluster", cfg.Host,
		"sandboxNamespace", ns, "auditLog", o.AuditLog, "approvalsDB", o.DB, "transport", map[bool]string{true: "http", false: "stdio"}[o.HTTPAddr != ""])
	if o.HTTPAddr == "" {
		return mcp.RunStdio(ctx, server)
	}
	srv := &http.Server{Addr: o.HTTPAddr, Handler: mcp.HTTPHandler(server), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
