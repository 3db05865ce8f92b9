package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	admissionregistrationv1client "k8s.io/client-go/kubernetes/typed/admissionregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/cli"
	"github.com/agent-sandbox/agent-sandbox/internal/installcheck"
	"github.com/agent-sandbox/agent-sandbox/webhook"
)

// checkInstallOptions are the flags of `agent-sandbox check-install`.
type checkInstallOptions struct {
	Service          string
	Namespace        string
	Port             int
	SandboxNamespace string
	WebhookConfig    string
	// ConfigurationsGuard names the admission policy and binding that keep the webhook's ServiceAccount to
	// injecting caBundle; empty (cert-manager TLS) checks none.
	ConfigurationsGuard string
	Image               string
	Timeout             time.Duration
}

func NewCheckInstallCommand(streams cli.IO) *cobra.Command {
	o := &checkInstallOptions{}
	cmd := &cobra.Command{
		Use:   "check-install",
		Short: "Check an installed webhook from inside the cluster (what the chart's helm test runs)",
		Long: `Check, from a Pod in the cluster, that the installed agent-sandbox webhook works:

  * its Service answers TLS with a certificate for <service>.<namespace>.svc, valid now: every ready
    endpoint of its https port (from its EndpointSlices, so no cluster DNS is needed), or, when they
    cannot be listed, the Service's DNS name on --port;
  * the API server refuses an unsafe Job (privileged, host network, no policy tool) in the sandbox
    namespace, and the refusal comes from the agent-sandbox webhook. The Job is a server-side dry run:
    nothing is stored and no approval is consumed. An error calling the webhook fails the check;
  * the registered webhook configurations (--webhook-config) guard at least what agent-sandbox renders
    for this install: every webhook present, failing closed, calling the webhook Service, matching the
    rendered rules, selectors and match conditions. One set to Ignore, narrowed or removed after the
    install (a hand edit, a post-renderer, a GitOps tool) fails the check;
  * with --configurations-guard (the chart's self-managed TLS), the ValidatingAdmissionPolicy that keeps
    the webhook's ServiceAccount to injecting caBundle is there, fails closed, and its binding denies.

Each check is retried until --timeout, since the webhook may still be starting. It needs a Kubernetes
client (in a Pod: its ServiceAccount) allowed to create Jobs in the sandbox namespace and to get the
webhook configurations (and the guard's policy and binding).`,
		Args: cli.Usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Namespace == "" {
				o.Namespace = os.Getenv("POD_NAMESPACE")
			}
			if err := o.Validate(); err != nil {
				return cli.UsageError{Err: err}
			}
			cfg, err := ctrl.GetConfig()
			if err != nil {
				return fmt.Errorf("kubernetes client config: %w", err)
			}
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return fmt.Errorf("kubernetes client: %w", err)
			}
			// What agent-sandbox renders for this install: the names whose denial counts, and what the
			// registered configurations must guard at least.
			m, v := webhook.Configurations(webhook.ConfigurationsFor{Name: o.WebhookConfig, ServiceNamespace: o.Namespace,
				ServiceName: o.Service, Port: int32(o.Port), SandboxNamespace: o.SandboxNamespace})
			var names []string
			for _, w := range m.Webhooks {
				names = append(names, w.Name)
			}
			for _, w := range v.Webhooks {
				names = append(names, w.Name)
			}
			ar := cs.AdmissionregistrationV1()
			return installcheck.Run(cmd.Context(), installcheck.Options{
				Service: o.Service, Namespace: o.Namespace, Port: o.Port, SandboxNamespace: o.SandboxNamespace,
				Jobs: cs.BatchV1().Jobs(o.SandboxNamespace), WebhookNames: names, Image: o.Image, Timeout: o.Timeout, Out: streams.Out,
				Endpoints: func(ctx context.Context) ([]string, error) { return webhookEndpoints(ctx, cs, o.Namespace, o.Service) },
				Live: func(ctx context.Context) (*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration, error) {
					lm, err := ar.MutatingWebhookConfigurations().Get(ctx, o.WebhookConfig, metav1.GetOptions{})
					if err != nil {
						return nil, nil, err
					}
					lv, err := ar.ValidatingWebhookConfigurations().Get(ctx, o.WebhookConfig, metav1.GetOptions{})
					return lm, lv, err
				},
				WantM: m, WantV: v,
				Guard: guardReader(ar, o.ConfigurationsGuard),
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Service, "service", "agent-sandbox-webhook", "the webhook's Service")
	f.StringVar(&o.Namespace, "namespace", "", "the webhook's namespace (default $POD_NAMESPACE)")
	f.IntVar(&o.Port, "port", 443, "the Service's HTTPS port")
	f.StringVar(&o.SandboxNamespace, "sandbox-namespace", "agent-sandbox", "the namespace the webhook guards")
	f.StringVar(&o.WebhookConfig, "webhook-config", "agent-sandbox", "name of the mutating and validating webhook configurations (the chart's webhook.configurationName)")
	f.StringVar(&o.ConfigurationsGuard, "configurations-guard", "", "name of the ValidatingAdmissionPolicy and binding that keep the webhook's ServiceAccount to injecting caBundle (the chart sets it with tls.mode self); empty: not checked")
	f.StringVar(&o.Image, "image", "registry.invalid/agent-sandbox-install-check:unsafe", "image of the unsafe Job (a dry run never pulls it)")
	f.DurationVar(&o.Timeout, "timeout", 2*time.Minute, "how long to retry the checks")
	return cmd
}

// Validate reports every problem with the flags at once.
func (o *checkInstallOptions) Validate() error {
	var errs []error
	if o.Namespace == "" {
		errs = append(errs, errors.New("--namespace (or $POD_NAMESPACE) is required"))
	}
	if o.Service == "" || o.SandboxNamespace == "" || o.WebhookConfig == "" {
		errs = append(errs, errors.New("--service, --sandbox-namespace and --webhook-config must not be empty"))
	}
	if o.Port <= 0 || o.Port > 65535 {
		errs = append(errs, fmt.Errorf("--port %d is not a port", o.Port))
	}
	if o.Timeout <= 0 {
		errs = append(errs, errors.New("--timeout must be positive"))
	}
	return errors.Join(errs...)
}

// webhookEndpoints lists the ready endpoints of the Service's https port as host:port, from its
// EndpointSlices: the test Pod dials each replica directly, which needs no cluster DNS.
func webhookEndpoints(ctx context.Context, cs kubernetes.Interface, namespace, service string) ([]string, error) {
	slices, err := cs.DiscoveryV1().EndpointSlices(namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service})
	if err != nil {
		return nil, err
	}
	var addrs []string
	for _, sl := range slices.Items {
		for _, p := range sl.Ports {
			if p.Port == nil || p.Name == nil || *p.Name != "https" {
				continue
			}
			for _, ep := range sl.Endpoints {
				if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
					continue
				}
				for _, a := range ep.Addresses {
					addrs = append(addrs, net.JoinHostPort(a, strconv.Itoa(int(*p.Port))))
				}
			}
		}
	}
	return addrs, nil
}

// guardReader reads the admission policy and binding named name, or is nil when name is empty. One that is
// gone is drift, not a webhook still starting: it is reported at once.
func guardReader(ar admissionregistrationv1client.AdmissionregistrationV1Interface, name string) func(ctx context.Context) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding, error) {
	if name == "" {
		return nil
	}
	return func(ctx context.Context) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding, error) {
		p, err := ar.ValidatingAdmissionPolicies().Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			var b *admissionregistrationv1.ValidatingAdmissionPolicyBinding
			if b, err = ar.ValidatingAdmissionPolicyBindings().Get(ctx, name, metav1.GetOptions{}); err == nil {
				return p, b, nil
			}
		}
		if apierrors.IsNotFound(err) {
			err = fmt.Errorf("%w: %v", installcheck.ErrDrifted, err)
		}
		return nil, nil, err
	}
}
