package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/cli"
	"github.com/agent-sandbox/agent-sandbox/internal/contentgc"
	"github.com/agent-sandbox/agent-sandbox/internal/ledger"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/servingcert"
	"github.com/agent-sandbox/agent-sandbox/internal/tick"
	"github.com/agent-sandbox/agent-sandbox/internal/warmpool"
	"github.com/agent-sandbox/agent-sandbox/webhook"
)

// webhookOptions are the flags of `agent-sandbox webhook`.
type webhookOptions struct {
	PolicyFile         string
	ApproverKeysFile   string
	Port               int
	CertDir            string
	TLSMode            string
	TLSSecret          string
	ClaimSigningSecret string
	ServiceName        string
	WebhookConfig      string
	Namespace          string
	MetricsAddr        string
	MetricsSecure      bool
	HealthAddr         string
	// Identities (the --*-user and --admin-group flags) bind straight into what the checker is given.
	Identities       webhook.Identities
	WarmPool         bool
	WarmPoolInterval time.Duration
	WarmPoolLease    string
	ReloadInterval   time.Duration
	AnchorRetention  time.Duration
	LogLevel         string

	logLevel slog.Level
	streams  cli.IO
}

func NewWebhookCommand(streams cli.IO) *cobra.Command {
	o := &webhookOptions{streams: streams}
	cmd := &cobra.Command{
		Use:   "webhook",
		Short: "Run the admission webhook that enforces the policy on every sandbox Job and Pod",
		Long: `Run the validating and mutating admission webhook. For namespaces labelled
agent-sandbox.dev/sandbox=true it injects the credential agent into Jobs, and admits a Job or Pod only
if it passes every admission rule of the policy, runs exactly what the policy renders for its declared
parameters, uses the tool's ServiceAccount and an allowed target namespace, and, for tools that need
approval, carries a signed approval token that has never been used.

The policy and the approver public keys are read from files (mounted ConfigMaps) and reloaded when
they change; a policy that does not compile is refused and the last good one keeps serving.

TLS: with --tls-mode=self (default) the webhook keeps a CA and serving certificate in a Secret and
injects the CA into its webhook configurations; with --tls-mode=files it serves tls.crt/tls.key from
--cert-dir (for cert-manager).`,
		Args: cli.Usage(cobra.NoArgs),
		RunE: cli.RunE(o),
	}
	f := cmd.Flags()
	f.StringVar(&o.PolicyFile, "policy", "/etc/agent-sandbox/policy/policy.yaml", "policy file (reloaded on change)")
	f.StringVar(&o.ApproverKeysFile, "approver-keys", "/etc/agent-sandbox/approvers/approvers.jwks.json", "approver public keys, a JWK set (reloaded on change)")
	f.IntVar(&o.Port, "port", 9443, "HTTPS port of the admission endpoints")
	f.StringVar(&o.CertDir, "cert-dir", "/tmp/agent-sandbox-webhook/certs", "folder with tls.crt and tls.key (written by --tls-mode=self)")
	f.StringVar(&o.TLSMode, "tls-mode", "self", "self: manage a CA and serving certificate in a Secret and inject the caBundle; files: serve what is in --cert-dir")
	f.StringVar(&o.TLSSecret, "tls-secret", "agent-sandbox-webhook-tls", "Secret that holds the self-managed CA and certificate")
	f.StringVar(&o.ClaimSigningSecret, "claim-signing-secret", "agent-sandbox-claim-signing",
		"Secret (in --namespace) with the Ed25519 key that signs warm claims, shared by every replica; created with a fresh key when missing. Warm Pods verify the signature before they mint or run anything")
	f.StringVar(&o.ServiceName, "service-name", "agent-sandbox-webhook", "the webhook's Service (certificate names, caBundle injection)")
	f.StringVar(&o.WebhookConfig, "webhook-config", "agent-sandbox", "name of the Mutating- and ValidatingWebhookConfiguration to inject the caBundle into")
	f.StringVar(&o.Namespace, "namespace", "", "the webhook's own namespace (default $POD_NAMESPACE); the approval ledger, the audit anchors and the TLS Secret live there")
	f.StringVar(&o.MetricsAddr, "metrics-bind-address", ":8080", "Prometheus metrics address (\"0\" disables)")
	f.BoolVar(&o.MetricsSecure, "metrics-secure", false, "serve metrics over HTTPS with the webhook's certificate (--cert-dir), only to callers whose bearer token the API server authenticates and authorizes for get on /metrics (needs create on tokenreviews and subjectaccessreviews)")
	f.StringVar(&o.HealthAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	f.StringSliceVar(&o.Identities.JobControllerUsers, "job-controller-user", webhook.DefaultJobControllerUsers, "API users allowed to create Pods in sandbox namespaces (the Job controller)")
	f.StringSliceVar(&o.Identities.SchedulerUsers, "scheduler-user", webhook.DefaultSchedulerUsers, "API users allowed to bind sandbox Pods to nodes (the scheduler)")
	f.StringSliceVar(&o.Identities.AdminUsers, "admin-user", nil, "API users allowed to change the sandbox namespace's labels, NetworkPolicies, ResourceQuotas, LimitRanges and ServiceAccounts (the chart's identity)")
	f.StringSliceVar(&o.Identities.AdminGroups, "admin-group", webhook.DefaultAdminGroups, "API groups allowed to do the same")
	f.StringVar(&o.Identities.MCPUser, "mcp-user", "", "the MCP server's API user (system:serviceaccount:NAMESPACE:NAME); it may create only content-addressed workspace and plan ConfigMaps")
	f.StringSliceVar(&o.Identities.PoolUsers, "pool-user", nil, "API users allowed to create warm Jobs (the webhook's own ServiceAccount, system:serviceaccount:NAMESPACE:NAME); empty: nobody")
	f.StringSliceVar(&o.Identities.StatusControllerUsers, "status-controller-user", webhook.DefaultStatusControllerUsers, "API users allowed to write a sandbox Pod's status besides its own node and the scheduler (never its metadata)")
	f.StringSliceVar(&o.Identities.NamespaceControllerUsers, "namespace-controller-user", webhook.DefaultNamespaceControllerUsers, "API users allowed to write the sandbox namespace's status and finalize subresources (never its metadata)")
	f.StringSliceVar(&o.Identities.QuotaControllerUsers, "quota-controller-user", webhook.DefaultQuotaControllerUsers, "API users allowed to write the sandbox namespace's resourcequotas/status")
	f.StringSliceVar(&o.Identities.GCUsers, "gc-user", webhook.DefaultGCUsers, "API users allowed to remove a sandbox Pod's owner reference (the garbage collector)")
	f.StringSliceVar(&o.Identities.ServiceAccountControllerUsers, "service-account-controller-user", webhook.DefaultServiceAccountControllerUsers, "API users allowed to create the sandbox namespace's bare \"default\" ServiceAccount besides the chart's identity (the controller that makes it in every namespace)")
	f.BoolVar(&o.WarmPool, "warm-pool", true, "keep the warm pools the policy declares (tools[].warmPool); one replica does it at a time, elected through a Lease")
	f.DurationVar(&o.WarmPoolInterval, "warm-pool-interval", time.Second, "how often the pool controller brings each pool to its size")
	f.StringVar(&o.WarmPoolLease, "warm-pool-lease", "agent-sandbox-warm-pool", "the Lease (in --namespace) that elects the replica keeping the pools")
	f.DurationVar(&o.ReloadInterval, "reload-interval", 2*time.Second, "how often to check the policy and keys files for changes")
	f.DurationVar(&o.AnchorRetention, "audit-anchor-retention", webhook.DefaultAnchorRetention,
		"how long to keep each admitted call's audit anchor (one small ConfigMap per call in --namespace), which `audit verify --against-cluster` reads")
	f.StringVar(&o.LogLevel, "log-level", "info", cli.LogLevelHelp)
	return cmd
}

// Complete fills defaults from the environment.
func (o *webhookOptions) Complete() error {
	if o.Namespace == "" {
		o.Namespace = os.Getenv("POD_NAMESPACE")
	}
	return nil
}

// Validate reports every problem with the flags at once.
func (o *webhookOptions) Validate() error {
	var errs []error
	if o.Namespace == "" {
		errs = append(errs, errors.New("--namespace (or $POD_NAMESPACE) is required"))
	}
	if o.TLSMode != "self" && o.TLSMode != "files" {
		errs = append(errs, fmt.Errorf("--tls-mode must be self or files, not %q", o.TLSMode))
	}
	if o.Port <= 0 || o.Port > 65535 {
		errs = append(errs, fmt.Errorf("--port %d is not a port", o.Port))
	}
	if o.ClaimSigningSecret == "" {
		errs = append(errs, errors.New("--claim-signing-secret is required"))
	}
	if o.WarmPool && o.WarmPoolInterval < 100*time.Millisecond {
		errs = append(errs, errors.New("--warm-pool-interval must be at least 100ms"))
	}
	if o.ReloadInterval < 100*time.Millisecond {
		errs = append(errs, errors.New("--reload-interval must be at least 100ms"))
	}
	if o.AnchorRetention < time.Hour {
		errs = append(errs, errors.New("--audit-anchor-retention must be at least 1h: an anchor must outlive its call"))
	}
	errs = append(errs, everyone(o.Identities)...)
	level, err := cli.ParseLogLevel(o.LogLevel)
	if err != nil {
		errs = append(errs, err)
	}
	o.logLevel = level
	return errors.Join(errs...)
}

// everyoneNames are the users and groups that stand for everyone (or every ServiceAccount): trusting one of
// them as the chart's identity or a controller would trust anybody.
var everyoneNames = []string{"system:authenticated", "system:unauthenticated", "system:anonymous", "system:serviceaccounts"}

// everyone reports each identity flag that names everyone; the chart's schema refuses the same values.
func everyone(id webhook.Identities) []error {
	var errs []error
	for _, f := range []struct {
		flag  string
		names []string
	}{
		{"admin-user", id.AdminUsers}, {"admin-group", id.AdminGroups}, {"mcp-user", []string{id.MCPUser}},
		{"job-controller-user", id.JobControllerUsers}, {"scheduler-user", id.SchedulerUsers}, {"pool-user", id.PoolUsers},
		{"status-controller-user", id.StatusControllerUsers}, {"namespace-controller-user", id.NamespaceControllerUsers},
		{"quota-controller-user", id.QuotaControllerUsers}, {"gc-user", id.GCUsers},
		{"service-account-controller-user", id.ServiceAccountControllerUsers},
	} {
		for _, n := range f.names {
			if slices.Contains(everyoneNames, n) || strings.HasPrefix(n, "system:serviceaccounts:") {
				errs = append(errs, fmt.Errorf("--%s %q stands for everyone (or every ServiceAccount of a namespace): name the exact users or groups", f.flag, n))
			}
		}
	}
	return errs
}

// Run wires the manager, the handlers, certificate management and reloading, and serves until ctx ends.
func (o *webhookOptions) Run(ctx context.Context) error {
	log := logr.FromSlogHandler(slog.NewJSONHandler(o.streams.ErrOut, &slog.HandlerOptions{Level: o.logLevel}))
	ctrl.SetLogger(log)

	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("kubernetes client config: %w", err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	direct, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}

	tlsm, err := o.ensureServingCert(ctx, log, direct)
	if err != nil {
		return err
	}
	signer, err := o.ensureClaimSigner(ctx, log, direct)
	if err != nil {
		return err
	}

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                o.metricsOptions(),
		HealthProbeBindAddress: o.HealthAddr,
		WebhookServer:          crwebhook.NewServer(crwebhook.Options{Port: o.Port, CertDir: o.CertDir}),
	})
	if err != nil {
		return fmt.Errorf("manager: %w", err)
	}
	metrics, err := webhook.NewMetrics(crmetrics.Registry)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	records := &ledger.ConfigMapLedger{Client: direct, Namespace: o.Namespace}
	checker := &webhook.Checker{Ledger: records, Pods: records, Claims: records, Anchors: records, AnchorRetention: o.AnchorRetention,
		Cluster: apiReader{mgr.GetAPIReader()}, ClaimSigner: signer, Identities: o.Identities}
	src := &webhook.FileSource{PolicyPath: o.PolicyFile, KeysPath: o.ApproverKeysFile, Checker: checker, Metrics: metrics, Log: log.WithName("reload")}
	if err := src.Load(); err != nil {
		return err
	}
	p := checker.Policy()
	log.Info("policy loaded", "name", p.Metadata.Name, "version", p.Version, "tools", len(p.Spec.Tools), "rules", len(p.Spec.AdmissionRules))

	srv := mgr.GetWebhookServer()
	for path, h := range webhook.Handlers(scheme, checker, metrics) {
		srv.Register(path, h)
	}
	runnables := o.maintenanceLoops(src, records, direct, p, log)
	if o.WarmPool {
		pool := &webhook.Pool{Client: direct, ClaimKeys: signer.Keys(), Policy: checker.Policy, Log: log.WithName("warm-pool"), Metrics: metrics, Anchors: records}
		rec := &warmpool.Reconciler{Pool: pool, Interval: o.WarmPoolInterval, Log: log.WithName("warm-pool")}
		runnables = append(runnables, func(ctx context.Context) error {
			return runLeader(ctx, cfg, o.Namespace, o.WarmPoolLease, log.WithName("warm-pool"), func(ctx context.Context) {
				// While this replica leads, the controller runs; one that stops on its own (its cache could not
				// sync, say) is started again rather than leaving the Lease held by a replica doing nothing.
				for ctx.Err() == nil {
					if err := warmpool.Run(ctx, cfg, scheme, rec, p.Spec.Sandbox.Namespace); err != nil && ctx.Err() == nil {
						log.Error(err, "warm pool controller; starting it again")
					}
					sleepCtx(ctx, 2*time.Second)
				}
			})
		})
	}
	if tlsm != nil {
		runnables = append(runnables, func(ctx context.Context) error {
			tlsm.Run(ctx, time.Hour, func(err error) { log.Error(err, "certificate check failed") })
			return nil
		})
	}
	for _, r := range runnables {
		if err := mgr.Add(r); err != nil {
			return err
		}
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("webhook", srv.StartedChecker()); err != nil {
		return err
	}
	log.Info("serving admission webhook", "port", o.Port, "tlsMode", o.TLSMode)
	return mgr.Start(ctx)
}

// ensureServingCert, with --tls-mode=self, makes sure the serving certificate exists in its Secret and on
// disk before anything serves, retrying while the API server is not reachable yet. It returns nil when
// certificates are managed elsewhere.
func (o *webhookOptions) ensureServingCert(ctx context.Context, log logr.Logger, direct client.Client) (*servingcert.SelfManaged, error) {
	if o.TLSMode != "self" {
		return nil, nil
	}
	tlsm := &servingcert.SelfManaged{Client: direct, Namespace: o.Namespace, SecretName: o.TLSSecret,
		ServiceName: o.ServiceName, WebhookConfigs: []string{o.WebhookConfig}, CertDir: o.CertDir}
	if err := retryUntil(ctx, 60*time.Second, func() error { return tlsm.Ensure(ctx) }); err != nil {
		return nil, fmt.Errorf("self-managed TLS: %w", err)
	}
	log.Info("serving certificate ready", "secret", o.Namespace+"/"+o.TLSSecret, "certDir", o.CertDir)
	return tlsm, nil
}

// ensureClaimSigner reads the claim signing key every replica shares through a Secret, creating it when
// there is none, retrying while the API server is not reachable yet.
func (o *webhookOptions) ensureClaimSigner(ctx context.Context, log logr.Logger, direct client.Client) (*webhook.ClaimSigner, error) {
	var signer *webhook.ClaimSigner
	if err := retryUntil(ctx, 60*time.Second, func() (err error) {
		signer, err = webhook.EnsureClaimSigningKey(ctx, direct, o.Namespace, o.ClaimSigningSecret)
		return err
	}); err != nil {
		return nil, fmt.Errorf("claim signing key: %w", err)
	}
	log.Info("claim signing key ready", "secret", o.Namespace+"/"+o.ClaimSigningSecret, "verifyKeys", len(signer.PublicKeys()))
	return signer, nil
}

// maintenanceLoops are the loops every webhook replica runs beside serving: reloading the policy and
// approver keys, and pruning the ledger and the expired workspaces and saved plans.
func (o *webhookOptions) maintenanceLoops(src *webhook.FileSource, records *ledger.ConfigMapLedger, direct client.Client, p *policy.Compiled, log logr.Logger) []manager.RunnableFunc {
	return []manager.RunnableFunc{
		func(ctx context.Context) error { src.Run(ctx, o.ReloadInterval); return nil },
		func(ctx context.Context) error {
			pruneLoop(ctx, "approval, Pod, claim and audit anchor ledger", records.Prune, log.WithName("ledger"))
			return nil
		},
		func(ctx context.Context) error {
			pruner := &contentgc.Pruner{Client: direct, Namespace: p.Spec.Sandbox.Namespace, MaxAge: p.Spec.Approval.RequestTTL.Duration}
			pruneLoop(ctx, "expired workspaces and saved plans", pruner.Prune, log.WithName("gc"))
			return nil
		},
	}
}

// metricsOptions serves metrics in plain HTTP, or with --metrics-secure through controller-runtime's secure
// serving: HTTPS with the webhook's own certificate (the files in --cert-dir, reloaded when they change),
// each request's bearer token checked by the API server (TokenReview, then a SubjectAccessReview for get on
// the request's path), and HTTP/2 off, as controller-runtime's own scaffolding advises, so the endpoint is
// not exposed to HTTP/2's stream-reset and rapid-reset attacks.
func (o *webhookOptions) metricsOptions() metricsserver.Options {
	opts := metricsserver.Options{BindAddress: o.MetricsAddr}
	if o.MetricsSecure {
		opts.SecureServing = true
		opts.CertDir = o.CertDir
		opts.FilterProvider = filters.WithAuthenticationAndAuthorization
		opts.TLSOpts = []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}
	}
	return opts
}

// apiReader reads Jobs and Pods straight from the API server: a Pod's owner was admitted moments ago and
// a cache could still miss it.
type apiReader struct{ r client.Reader }

var _ webhook.Cluster = apiReader{}

func (a apiReader) GetJob(ctx context.Context, ns, name string) (*batchv1.Job, error) {
	var job batchv1.Job
	if err := a.r.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &job); err != nil {
		return nil, err
	}
	return &job, nil
}

func (a apiReader) GetPod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	var pod corev1.Pod
	if err := a.r.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &pod); err != nil {
		return nil, err
	}
	return &pod, nil
}

// pruneLoop runs prune every ten minutes until ctx ends.
func pruneLoop(ctx context.Context, what string, prune func(context.Context) (int, error), log logr.Logger) {
	tick.Every(ctx, 10*time.Minute, func() {
		if n, err := prune(ctx); err != nil {
			log.Error(err, "prune failed", "what", what)
		} else if n > 0 {
			log.Info("pruned", "what", what, "count", n)
		}
	})
}

// retryUntil retries f with a growing pause until it succeeds, ctx ends or limit passes.
func retryUntil(ctx context.Context, limit time.Duration, f func() error) error {
	deadline := time.Now().Add(limit)
	pause := 250 * time.Millisecond
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
		pause = min(2*pause, 5*time.Second)
	}
}
