package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/cli"
	"github.com/agent-sandbox/agent-sandbox/internal/clientconfig"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
)

// Lifetimes of the MCP server's token. Kubernetes refuses TokenRequests shorter than 10 minutes; a week
// bounds how long a copied kubeconfig stays useful to whoever copied it.
const (
	defaultMCPTokenDuration = 24 * time.Hour
	minMCPTokenDuration     = 10 * time.Minute
	maxMCPTokenDuration     = 7 * 24 * time.Hour
)

// defaultMCPServiceAccount is the chart's MCP ServiceAccount (values mcp.serviceAccountName).
const defaultMCPServiceAccount = "agent-sandbox-mcp"

// NewKubeconfigCommand builds `agent-sandbox kubeconfig refresh`.
func NewKubeconfigCommand(streams cli.IO) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "kubeconfig",
		Short: "Write the MCP server's kubeconfig (sandbox namespace only)",
		Args:  cli.Usage(cobra.NoArgs),
	}
	cmd.AddCommand(newKubeconfigRefreshCommand(streams))
	return cmd
}

// kubeconfigRefreshOptions are the flags of `kubeconfig refresh`.
type kubeconfigRefreshOptions struct {
	Kubeconfig     string
	Context        string
	PolicyFile     string
	ServiceAccount string
	Duration       time.Duration
	Out            string
	Owner          string

	streams cli.IO
	paths   clientPaths
	// owner is Owner resolved; nil writes as the running user.
	owner *clientconfig.Owner
	// Replaced by tests.
	geteuid    func() int
	lookupUser func(string) (*user.User, error)
	newClient  func(*rest.Config) (kubernetes.Interface, error)
	now        func() time.Time
}

func newKubeconfigRefreshCommand(streams cli.IO) *cobra.Command {
	o := &kubeconfigRefreshOptions{streams: streams}
	cmd := &cobra.Command{
		Use:   "refresh",
		Short: "Request a new token for the MCP ServiceAccount and write the MCP server's kubeconfig",
		Long: `refresh uses your kubeconfig (--kubeconfig, else $KUBECONFIG, else ~/.kube/config) to request a token
for the chart's MCP ServiceAccount (--service-account in the policy's sandbox namespace) with the
Kubernetes TokenRequest API, and writes a kubeconfig for 'agent-sandbox mcp' that holds nothing but your
cluster's API server address, its CA and that token, with the sandbox namespace as its namespace. The
ServiceAccount's Role (installed by the Helm chart) lets it create Jobs and ConfigMaps and read Jobs, Pods,
events and logs in the sandbox namespace, and nothing else.

Your own credentials (client certificates, exec plugins, tokens) are never copied. A cluster entry that
skips TLS verification, or an API server that is not https, is refused.

The file is replaced atomically with mode 0600 (default ~/.config/agent-sandbox/mcp.kubeconfig, which
'agent-sandbox mcp' reads by default). Run as root through sudo, it writes for the user who ran sudo
($SUDO_USER): into that user's ~/.config/agent-sandbox, owned by them; --owner names another user. The
token lasts --duration (default 24h, at most 168h); the API server may shorten it, and the expiry printed
is the one it granted. Run refresh again before then: the MCP server reads the file at start, so restart
the MCP client afterwards.`,
		Example: `  # the local cluster (its admin kubeconfig is root's): writes ~/.config/agent-sandbox/mcp.kubeconfig for you
  sudo ~/.local/bin/agent-sandbox kubeconfig refresh --kubeconfig /var/lib/agent-sandbox-local/admin.kubeconfig

  # another cluster, with your own kubeconfig
  agent-sandbox kubeconfig refresh --context prod --duration 8h`,
		Args: cli.Usage(cobra.NoArgs),
		RunE: cli.RunE(o),
	}
	f := cmd.Flags()
	f.StringVar(&o.Kubeconfig, "kubeconfig", "", "your kubeconfig, allowed to request tokens for the MCP ServiceAccount (default $KUBECONFIG, else ~/.kube/config)")
	f.StringVar(&o.Context, "context", "", "context of --kubeconfig to use (default its current context)")
	f.StringVar(&o.PolicyFile, "policy", "", "policy file, for the sandbox namespace [default $AGENT_SANDBOX_POLICY, else ~/.config/agent-sandbox/policy.yaml, else ./policy/policy.yaml]")
	f.StringVar(&o.ServiceAccount, "service-account", defaultMCPServiceAccount, "the MCP ServiceAccount in the sandbox namespace (the chart's mcp.serviceAccountName)")
	f.DurationVar(&o.Duration, "duration", defaultMCPTokenDuration, "how long the token lasts (10m to 168h)")
	f.StringVar(&o.Out, "out", "", "where to write the kubeconfig (default ~/.config/agent-sandbox/mcp.kubeconfig of --owner, else yours)")
	f.StringVar(&o.Owner, "owner", "", "user to give the file to; needs root (default $SUDO_USER when run as root through sudo)")
	return cmd
}

// Complete fills the defaults: the owner, the output path and the policy.
func (o *kubeconfigRefreshOptions) Complete() error {
	if o.paths.getenv == nil {
		o.paths = newClientPaths()
	}
	if o.geteuid == nil {
		o.geteuid = os.Geteuid
	}
	if o.lookupUser == nil {
		o.lookupUser = user.Lookup
	}
	if o.newClient == nil {
		o.newClient = func(c *rest.Config) (kubernetes.Interface, error) { return kubernetes.NewForConfig(c) }
	}
	if o.now == nil {
		o.now = time.Now
	}
	if o.ServiceAccount == "" {
		o.ServiceAccount = defaultMCPServiceAccount
	}
	if o.Owner == "" && o.geteuid() == 0 {
		if su := o.paths.getenv("SUDO_USER"); su != "" && su != "root" {
			o.Owner = su
		}
	}
	var home string
	if o.Owner != "" {
		u, err := o.lookupUser(o.Owner)
		if err != nil {
			return cli.UsageError{Err: fmt.Errorf("--owner %s: %w", o.Owner, err)}
		}
		uid, errU := strconv.Atoi(u.Uid)
		gid, errG := strconv.Atoi(u.Gid)
		if errU != nil || errG != nil {
			return fmt.Errorf("--owner %s: uid %q gid %q are not numbers", o.Owner, u.Uid, u.Gid)
		}
		o.owner, home = &clientconfig.Owner{UID: uid, GID: gid}, u.HomeDir
	}
	if o.Out == "" {
		dir, err := clientconfig.Dir(o.paths.getenv)
		if o.owner != nil {
			// Another user's XDG_CONFIG_HOME is not ours to know: their ~/.config.
			dir, err = clientconfig.DirOfHome(home), nil
			if home == "" {
				err = fmt.Errorf("--owner %s has no home folder; pass --out", o.Owner)
			}
		}
		if err != nil {
			return cli.UsageError{Err: err}
		}
		o.Out = filepath.Join(dir, clientconfig.KubeconfigName)
	}
	p, err := o.paths.policy(o.PolicyFile)
	if err != nil {
		return cli.NotFoundError{Err: err}
	}
	o.PolicyFile = p
	return nil
}

// Validate checks the flags without touching the cluster.
func (o *kubeconfigRefreshOptions) Validate() error {
	var errs []error
	if o.Duration < minMCPTokenDuration || o.Duration > maxMCPTokenDuration {
		errs = append(errs, fmt.Errorf("--duration %s: must be between %s and %s", o.Duration, minMCPTokenDuration, maxMCPTokenDuration))
	}
	if o.owner != nil && o.geteuid() != 0 && o.owner.UID != o.geteuid() {
		errs = append(errs, fmt.Errorf("--owner %s: only root can write a file for another user", o.Owner))
	}
	return errors.Join(errs...)
}

// Run requests the token, renders the kubeconfig and writes it.
func (o *kubeconfigRefreshOptions) Run(ctx context.Context) error {
	pol, err := policy.LoadFile(o.PolicyFile, policy.WithoutAdmissionRules())
	if err != nil {
		return err
	}
	ns := pol.Spec.Sandbox.Namespace
	restCfg, err := cli.RESTConfig(o.Kubeconfig, o.Context)
	if err != nil {
		return fmt.Errorf("your kubeconfig: %w", err)
	}
	cluster, err := clusterOf(restCfg)
	if err != nil {
		return err
	}
	cs, err := o.newClient(restCfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	secs := int64(o.Duration / time.Second)
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, o.ServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("request a token for ServiceAccount %s/%s (is the Helm chart installed, and may your kubeconfig create serviceaccounts/token there?): %w", ns, o.ServiceAccount, err)
	}
	data, err := clientconfig.RenderKubeconfig(cluster, clientconfig.Credential{Namespace: ns, ServiceAccount: o.ServiceAccount, Token: tr.Status.Token})
	if err != nil {
		return err
	}
	if err := clientconfig.WriteFile(o.Out, data, clientconfig.KubeconfigMode, o.owner); err != nil {
		return err
	}
	expiry := tr.Status.ExpirationTimestamp.Time
	owner := ""
	if o.owner != nil {
		owner = " for " + o.Owner
	}
	_, err = fmt.Fprintf(o.streams.Out, "wrote %s%s: ServiceAccount %s/%s on %s, sandbox namespace only\nthe token expires %s (in %s); run `agent-sandbox kubeconfig refresh` again before then and restart your MCP client\n",
		o.Out, owner, ns, o.ServiceAccount, cluster.Server, expiry.UTC().Format(time.RFC3339), expiry.Sub(o.now()).Round(time.Minute))
	return err
}

// clusterOf keeps what identifies the API server in the operator's configuration: its address, CA and
// TLS server name. An insecure entry is refused rather than copied.
func clusterOf(c *rest.Config) (clientconfig.Cluster, error) {
	if c.Insecure {
		return clientconfig.Cluster{}, errors.New("your kubeconfig's cluster skips TLS verification (insecure-skip-tls-verify): refusing to send the MCP token to a server nobody verified; give it the API server's CA")
	}
	ca := c.CAData
	if len(ca) == 0 && c.CAFile != "" {
		b, err := os.ReadFile(c.CAFile)
		if err != nil {
			return clientconfig.Cluster{}, fmt.Errorf("your kubeconfig's CA: %w", err)
		}
		ca = b
	}
	return clientconfig.Cluster{Server: c.Host, CAData: ca, TLSServerName: c.ServerName}, nil
}
