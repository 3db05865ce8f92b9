// Package preflight checks a cluster before agent-sandbox is installed on it, by experiment rather than by
// reading configuration: a probe Pod under the gVisor RuntimeClass must report gVisor's kernel, a probe Pod
// under a default-deny egress NetworkPolicy shaped like the chart's must fail to reach a server it reached
// without one while still reaching the API server, Vault and DNS, and the API server must be able to call a
// webhook served by a Pod. Everything it creates lives in one temporary namespace and one uniquely named
// ValidatingWebhookConfiguration (failurePolicy Ignore, scoped to that namespace), both deleted at the end.
// One check only reads: the namespaces the policy's tools deploy into must enforce a Pod Security level
// (package podsecurity decides what counts).
package preflight

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/agent-sandbox/agent-sandbox/internal/certs"
)

// Status of one check.
type Status string

// The statuses a check ends in.
const (
	Pass Status = "PASS"
	Fail Status = "FAIL"
	Skip Status = "SKIP"
	// Warn is a finding that does not make the cluster unsafe by itself but must be read: a target
	// namespace that does not exist yet, or one that enforces no Pod Security level when told to allow it.
	Warn Status = "WARN"
)

// Check is the outcome of one check: what was found and, on failure, what to do about it.
type Check struct {
	Name   string `json:"name"`
	Status Status `json:"status"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

// Options configure a preflight run.
type Options struct {
	Client kubernetes.Interface
	// RuntimeClass is the gVisor RuntimeClass the policy names (spec.sandbox.runtimeClassName).
	RuntimeClass string
	// Image holds the agent-sandbox binary at Binary; the probes run it.
	Image      string
	Binary     string
	PullPolicy corev1.PullPolicy
	// VaultAddr is Vault's address as sandbox Pods reach it (the chart's vault.address); VaultCIDR the
	// NetworkPolicy peer that allows it (the chart's vault.egress), default the address's IP/32.
	VaultAddr string
	VaultCIDR string
	// NodeSelector and Tolerations are the policy's spec.sandbox ones (GKE: sandbox.gke.io/runtime=gvisor).
	NodeSelector map[string]string
	Tolerations  []corev1.Toleration
	// Namespaces are the namespaces the policy's tools target (policy.TargetNamespaces); each must enforce
	// a Pod Security level. None: the check is skipped.
	Namespaces []string
	// AllowUnenforcedNamespaces makes a target namespace that enforces no Pod Security level a warning
	// instead of a failure.
	AllowUnenforcedNamespaces bool
	// Timeout bounds each probe Pod, from creation to its report.
	Timeout time.Duration
	// Keep leaves the namespace and the webhook configuration in place, for debugging.
	Keep bool
	// Progress, when set, is told what is happening (one line per step).
	Progress func(string)
}

const (
	labelPreflight = "agent-sandbox.dev/preflight"
	labelRole      = "agent-sandbox.dev/preflight-role"
	serverPort     = 8080
	webhookPort    = 9443
	connectTimeout = 3 * time.Second
)

type run struct {
	Options
	ns     string
	vwc    string
	checks []Check
}

// Run performs every check and returns them in order. The error is only for what stopped the run itself
// (the cluster cannot be reached, the namespace cannot be created); failed checks are Checks.
func Run(ctx context.Context, o Options) ([]Check, error) {
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Minute
	}
	if o.Binary == "" {
		o.Binary = "/agent-sandbox"
	}
	if o.PullPolicy == "" {
		o.PullPolicy = corev1.PullIfNotPresent
	}
	if o.Progress == nil {
		o.Progress = func(string) {}
	}
	suffix := randomHex(3)
	r := &run{Options: o, ns: "agent-sandbox-preflight-" + suffix, vwc: "agent-sandbox-preflight-" + suffix}

	v, err := o.Client.Discovery().ServerVersion()
	if err != nil {
		return nil, fmt.Errorf("reach the cluster: %w", err)
	}
	r.add(Check{Name: "cluster", Status: Pass, Detail: "Kubernetes " + v.GitVersion + " answers"})
	r.add(podSecurityCheck(ctx, o.Client.CoreV1().Namespaces(), o.Namespaces, o.AllowUnenforcedNamespaces))

	rcOK := r.runtimeClass(ctx)
	if err := r.createNamespace(ctx); err != nil {
		return r.checks, err
	}
	if !o.Keep {
		defer r.cleanup()
	}
	if rcOK {
		r.gvisor(ctx)
		r.network(ctx)
	} else {
		for _, n := range []string{"gvisor", "networkpolicy", "apiserver-egress", "vault-egress", "dns-egress"} {
			r.add(Check{Name: n, Status: Skip, Detail: "needs the RuntimeClass " + o.RuntimeClass})
		}
	}
	r.webhook(ctx)
	return r.checks, nil
}

func (r *run) add(c Check) { r.checks = append(r.checks, c) }

func (r *run) runtimeClass(ctx context.Context) bool {
	rc, err := r.Client.NodeV1().RuntimeClasses().Get(ctx, r.RuntimeClass, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		r.add(Check{Name: "runtimeclass", Status: Fail, Detail: "no RuntimeClass " + r.RuntimeClass,
			Fix: "install gVisor on a node pool and create the RuntimeClass (GKE: a node pool with --sandbox type=gvisor creates \"gvisor\"; elsewhere: helm install ... --set runtimeClass.create=true with runsc on the nodes); see docs/install.md"})
		return false
	}
	if err != nil {
		r.add(Check{Name: "runtimeclass", Status: Fail, Detail: "read RuntimeClass " + r.RuntimeClass + ": " + err.Error()})
		return false
	}
	r.add(Check{Name: "runtimeclass", Status: Pass, Detail: fmt.Sprintf("RuntimeClass %s uses handler %q", rc.Name, rc.Handler)})
	return true
}

func (r *run) createNamespace(ctx context.Context) error {
	r.Progress("creating namespace " + r.ns)
	_, err := r.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.ns,
		Labels: map[string]string{labelPreflight: "true", "pod-security.kubernetes.io/enforce": "restricted"}}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create the preflight namespace %s: %w", r.ns, err)
	}
	return nil
}

func (r *run) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = r.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, r.vwc, metav1.DeleteOptions{})
	_ = r.Client.CoreV1().Namespaces().Delete(ctx, r.ns, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
}

// gvisor runs a probe Pod under the RuntimeClass and asks it which kernel answers.
func (r *run) gvisor(ctx context.Context) {
	r.Progress("probing the kernel under RuntimeClass " + r.RuntimeClass)
	var k KernelReport
	if err := r.probe(ctx, r.pod("kernel", "client", true, "kernel"), &k); err != nil {
		r.add(Check{Name: "gvisor", Status: Fail, Detail: err.Error()})
		return
	}
	if !k.GVisor {
		r.add(Check{Name: "gvisor", Status: Fail, Detail: fmt.Sprintf("a Pod under RuntimeClass %s runs on kernel %q, not gVisor's", r.RuntimeClass, k.Version),
			Fix: "the RuntimeClass's handler must be gVisor's runsc (containerd: a runtime of type io.containerd.runsc.v1)"})
		return
	}
	r.add(Check{Name: "gvisor", Status: Pass, Detail: fmt.Sprintf("a Pod under RuntimeClass %s runs on gVisor (%s)", r.RuntimeClass, firstLine(k.Log))})
}

// network proves that NetworkPolicy egress rules are enforced for sandboxed Pods, and that the allowances
// the chart makes (API server, Vault, DNS) work under them.
func (r *run) network(ctx context.Context) {
	names := []string{"networkpolicy", "apiserver-egress", "vault-egress", "dns-egress"}
	skipAll := func(why string) {
		for _, n := range names {
			r.add(Check{Name: n, Status: Fail, Detail: why})
		}
	}
	api, err := r.apiEndpoints(ctx)
	if err != nil {
		skipAll("find the API server's endpoints: " + err.Error())
		return
	}
	vaultHostPort, vaultCIDR, vaultPort, err := r.vault()
	if err != nil {
		skipAll(err.Error())
		return
	}
	dnsName := ""
	if _, err := r.Client.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{}); err == nil {
		dnsName = "kubernetes.default.svc.cluster.local"
	}

	r.Progress("starting the server Pod the client must not reach under the policy")
	server := r.pod("server", "server", false, "serve", "--listen", ":"+strconv.Itoa(serverPort))
	if _, err := r.Client.CoreV1().Pods(r.ns).Create(ctx, server, metav1.CreateOptions{}); err != nil {
		skipAll("create the server Pod: " + err.Error())
		return
	}
	ip, err := r.waitRunning(ctx, server.Name)
	if err != nil {
		skipAll("the server Pod: " + err.Error())
		return
	}
	serverTarget := net.JoinHostPort(ip, strconv.Itoa(serverPort))
	targets := []string{serverTarget, api[0].target, vaultHostPort}
	if dnsName != "" {
		targets = append(targets, "dns:"+dnsName)
	}
	connect := func(name string) (map[string]ConnectOutcome, error) {
		args := append([]string{"connect", "--timeout", connectTimeout.String()}, targets...)
		var rep ConnectReport
		if err := r.probe(ctx, r.pod(name, "client", true, args...), &rep); err != nil {
			return nil, err
		}
		m := map[string]ConnectOutcome{}
		for _, t := range rep.Targets {
			m[t.Target] = t
		}
		return m, nil
	}

	r.Progress("connecting without a NetworkPolicy (baseline)")
	base, err := connect("baseline")
	if err != nil {
		skipAll("the baseline probe: " + err.Error())
		return
	}
	if !base[serverTarget].Connected {
		skipAll(fmt.Sprintf("without any NetworkPolicy a sandboxed Pod cannot reach another Pod (%s: %s), so enforcement cannot be told apart from a broken Pod network",
			serverTarget, base[serverTarget].Error))
		return
	}

	r.Progress("applying a default-deny egress NetworkPolicy shaped like the chart's")
	if err := r.policies(ctx, api, vaultCIDR, vaultPort, dnsName != ""); err != nil {
		skipAll("create the NetworkPolicies: " + err.Error())
		return
	}
	under, err := r.connectUnderPolicy(connect, serverTarget)
	if err != nil {
		skipAll("the probe under the policy: " + err.Error())
		return
	}
	r.reportEnforcement(serverTarget, under[serverTarget])
	r.reportAPIEgress(under[api[0].target])
	r.reportVaultEgress(vaultHostPort, vaultCIDR, base[vaultHostPort], under[vaultHostPort])
	r.reportDNSEgress(dnsName, under["dns:"+dnsName])
}

// connectUnderPolicy probes the targets under the NetworkPolicies. Enforcers program their rules
// asynchronously; a Pod created right after its policy may get a few unpoliced packets on some of them. Two
// attempts, a few seconds apart, before calling it unenforced.
func (r *run) connectUnderPolicy(connect func(name string) (map[string]ConnectOutcome, error), serverTarget string) (map[string]ConnectOutcome, error) {
	var under map[string]ConnectOutcome
	for attempt := 1; attempt <= 2; attempt++ {
		time.Sleep(3 * time.Second)
		r.Progress(fmt.Sprintf("connecting under the policy (attempt %d)", attempt))
		var err error
		under, err = connect("policed-" + strconv.Itoa(attempt))
		if err != nil {
			return nil, err
		}
		if !under[serverTarget].Connected {
			break
		}
	}
	return under, nil
}

// reportEnforcement records whether the default-deny policy dropped the connection to the server Pod that
// worked without it: the proof that NetworkPolicy is enforced at all.
func (r *run) reportEnforcement(serverTarget string, under ConnectOutcome) {
	if under.Connected {
		r.add(Check{Name: "networkpolicy", Status: Fail,
			Detail: fmt.Sprintf("NetworkPolicy is not enforced: a sandboxed Pod under a default-deny egress NetworkPolicy still connected to %s", serverTarget),
			Fix:    "install a NetworkPolicy enforcer: GKE Dataplane V2 (--enable-dataplane-v2), EKS VPC CNI with enableNetworkPolicy=true, kind with Calico or kube-network-policies; see docs/install.md"})
	} else {
		r.add(Check{Name: "networkpolicy", Status: Pass, Detail: fmt.Sprintf("a default-deny egress NetworkPolicy dropped a connection that worked without it (%s: %s)", serverTarget, shortErr(under.Error))})
	}
}

// reportAPIEgress records whether the API server stayed reachable under the chart's allowance for it.
func (r *run) reportAPIEgress(o ConnectOutcome) {
	if o.Connected {
		r.add(Check{Name: "apiserver-egress", Status: Pass, Detail: "a sandboxed Pod reaches the API server at " + o.Target + " under the policy"})
	} else {
		r.add(Check{Name: "apiserver-egress", Status: Fail, Detail: fmt.Sprintf("a sandboxed Pod cannot reach the API server at %s under a policy that allows it: %s", o.Target, shortErr(o.Error)),
			Fix: "set the chart's apiServer.endpoints to the addresses in `kubectl get endpointslices -n default -l kubernetes.io/service-name=kubernetes`"})
	}
}

// reportVaultEgress records whether Vault stayed reachable under the chart's allowance for it, telling a
// Vault address Pods cannot reach at all from an egress CIDR that does not match Vault's traffic.
func (r *run) reportVaultEgress(vaultHostPort, vaultCIDR string, base, under ConnectOutcome) {
	if under.Connected {
		r.add(Check{Name: "vault-egress", Status: Pass, Detail: "a sandboxed Pod reaches Vault at " + vaultHostPort + " under the policy"})
	} else if !base.Connected {
		r.add(Check{Name: "vault-egress", Status: Fail, Detail: fmt.Sprintf("a sandboxed Pod cannot reach Vault at %s even without a NetworkPolicy: %s", vaultHostPort, shortErr(base.Error)),
			Fix: "give --vault-addr as Pods reach Vault (not 127.0.0.1), and make Vault listen there"})
	} else {
		r.add(Check{Name: "vault-egress", Status: Fail, Detail: fmt.Sprintf("a sandboxed Pod reaches Vault at %s without a NetworkPolicy, not under one allowing %s: %s", vaultHostPort, vaultCIDR, shortErr(under.Error)),
			Fix: "set the chart's vault.egress to the CIDR Vault's traffic really goes to (behind a load balancer: its addresses)"})
	}
}

// reportDNSEgress records whether cluster DNS stayed usable under the chart's allowance for it; without a
// kube-dns Service there is nothing to check.
func (r *run) reportDNSEgress(dnsName string, o ConnectOutcome) {
	switch {
	case dnsName == "":
		r.add(Check{Name: "dns-egress", Status: Skip, Detail: "no kube-system/kube-dns Service; sandboxes that need names need cluster DNS"})
	case o.Connected:
		r.add(Check{Name: "dns-egress", Status: Pass, Detail: "a sandboxed Pod resolves " + dnsName + " under the policy"})
	default:
		r.add(Check{Name: "dns-egress", Status: Fail, Detail: "a sandboxed Pod cannot resolve " + dnsName + " under a policy allowing DNS to kube-system: " + shortErr(o.Error),
			Fix: "with NodeLocal DNSCache add its address to the chart's networkPolicy.dns.to (169.254.20.10/32 on GKE)"})
	}
}

type endpoint struct {
	ip     string
	port   int32
	target string
}

func (r *run) apiEndpoints(ctx context.Context) ([]endpoint, error) {
	slices, err := r.Client.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=kubernetes"})
	if err != nil {
		return nil, err
	}
	var eps []endpoint
	for _, s := range slices.Items {
		var port int32
		for _, p := range s.Ports {
			if p.Port != nil {
				port = *p.Port
			}
		}
		for _, e := range s.Endpoints {
			for _, a := range e.Addresses {
				eps = append(eps, endpoint{ip: a, port: port, target: net.JoinHostPort(a, strconv.Itoa(int(port)))})
			}
		}
	}
	if len(eps) == 0 {
		return nil, errors.New("the default/kubernetes Service has no endpoints")
	}
	return eps, nil
}

func (r *run) vault() (hostPort, cidr string, port int, err error) {
	u, err := url.Parse(r.VaultAddr)
	if err != nil || u.Host == "" {
		return "", "", 0, fmt.Errorf("--vault-addr %q is not a URL such as http://10.0.0.5:8200", r.VaultAddr)
	}
	host, p := u.Hostname(), u.Port()
	if p == "" {
		p = map[string]string{"https": "443", "http": "80"}[u.Scheme]
	}
	port, err = strconv.Atoi(p)
	if err != nil {
		return "", "", 0, fmt.Errorf("--vault-addr %q has no usable port", r.VaultAddr)
	}
	cidr = r.VaultCIDR
	if cidr == "" {
		ip := net.ParseIP(host)
		if ip == nil {
			return "", "", 0, fmt.Errorf("--vault-addr %q names a host, and a NetworkPolicy allows addresses: give --vault-cidr too (the chart's vault.egress)", r.VaultAddr)
		}
		bits := 32
		if ip.To4() == nil {
			bits = 128
		}
		cidr = fmt.Sprintf("%s/%d", ip, bits)
	}
	return net.JoinHostPort(host, p), cidr, port, nil
}

// policies mirrors the chart's sandbox-namespace NetworkPolicies for the probe clients: deny everything,
// then allow the API server endpoints, Vault and DNS, each its own object.
func (r *run) policies(ctx context.Context, api []endpoint, vaultCIDR string, vaultPort int, dns bool) error {
	sel := metav1.LabelSelector{MatchLabels: map[string]string{labelRole: "client"}}
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	np := func(name string, rules ...networkingv1.NetworkPolicyEgressRule) *networkingv1.NetworkPolicy {
		return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: sel, PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}, Egress: rules}}
	}
	ipRule := func(cidr string, port int) networkingv1.NetworkPolicyEgressRule {
		return networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: cidr}}},
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: ptr.To(intstr.FromInt32(int32(port)))}}}
	}
	var apiRules []networkingv1.NetworkPolicyEgressRule
	for _, e := range api {
		bits := 32
		if net.ParseIP(e.ip).To4() == nil {
			bits = 128
		}
		apiRules = append(apiRules, ipRule(fmt.Sprintf("%s/%d", e.ip, bits), int(e.port)))
	}
	objs := []*networkingv1.NetworkPolicy{np("default-deny"), np("allow-apiserver", apiRules...), np("allow-vault", ipRule(vaultCIDR, vaultPort))}
	if dns {
		objs = append(objs, np("allow-dns", networkingv1.NetworkPolicyEgressRule{
			To:    []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "kube-system"}}}},
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: ptr.To(intstr.FromInt32(53))}, {Protocol: &tcp, Port: ptr.To(intstr.FromInt32(53))}}}))
	}
	// The policies are created before the allow rules are needed, so that no policed client ever starts
	// with a partial set.
	for _, o := range objs {
		if _, err := r.Client.NetworkingV1().NetworkPolicies(r.ns).Create(ctx, o, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// webhook proves that the API server can call an admission webhook served by a Pod, which the real webhook
// needs (private GKE clusters block it unless a firewall rule allows the control plane to reach 9443).
func (r *run) webhook(ctx context.Context) {
	const name = "webhook"
	fail := func(detail string) {
		r.add(Check{Name: "webhook-reachability", Status: Fail, Detail: detail})
	}
	svcDNS := name + "." + r.ns + ".svc"
	caPEM, certPEM, keyPEM, err := selfSigned(svcDNS)
	if err != nil {
		fail("make the probe webhook's certificate: " + err.Error())
		return
	}
	r.Progress("starting a probe webhook and registering it for this namespace only")
	if _, err := r.Client.CoreV1().Secrets(r.ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name + "-tls"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM}}, metav1.CreateOptions{}); err != nil {
		fail("create the probe webhook's Secret: " + err.Error())
		return
	}
	pod := r.pod(name, "webhook", false, "webhook", "--listen", ":"+strconv.Itoa(webhookPort), "--cert", "/tls/tls.crt", "--key", "/tls/tls.key")
	pod.Spec.Volumes = []corev1.Volume{{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: name + "-tls"}}}}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "tls", MountPath: "/tls", ReadOnly: true}}
	if _, err := r.Client.CoreV1().Pods(r.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		fail("create the probe webhook Pod: " + err.Error())
		return
	}
	if _, err := r.Client.CoreV1().Services(r.ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{Selector: map[string]string{labelRole: "webhook"},
			Ports: []corev1.ServicePort{{Port: 443, TargetPort: intstr.FromInt32(webhookPort)}}}}, metav1.CreateOptions{}); err != nil {
		fail("create the probe webhook Service: " + err.Error())
		return
	}
	if _, err := r.waitRunning(ctx, name); err != nil {
		fail("the probe webhook Pod: " + err.Error())
		return
	}
	ignore, none := admissionregistrationv1.Ignore, admissionregistrationv1.SideEffectClassNone
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: r.vwc, Labels: map[string]string{labelPreflight: "true"}},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "probe.preflight.agent-sandbox.dev",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{CABundle: caPEM,
				Service: &admissionregistrationv1.ServiceReference{Namespace: r.ns, Name: name, Path: ptr.To("/"), Port: ptr.To(int32(443))}},
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}},
			// Ignore and a selector on this namespace alone: a configuration left behind by a killed run
			// cannot block anything.
			FailurePolicy:           &ignore,
			SideEffects:             &none,
			TimeoutSeconds:          ptr.To(int32(10)),
			AdmissionReviewVersions: []string{"v1"},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": r.ns}},
			ObjectSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{labelPreflight: "probe"}},
		}}}
	if _, err := r.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{}); err != nil {
		fail("register the probe webhook (needs rights on validatingwebhookconfigurations, as installing the chart does): " + err.Error())
		return
	}
	r.Progress("asking the API server to call the probe webhook")
	deadline := time.Now().Add(r.Timeout)
	var last string
	for time.Now().Before(deadline) {
		_, err := r.Client.CoreV1().ConfigMaps(r.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe",
			Labels: map[string]string{labelPreflight: "probe"}}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil && strings.Contains(err.Error(), WebhookDenial) {
			r.add(Check{Name: "webhook-reachability", Status: Pass, Detail: "the API server called a webhook served by a Pod (Service " + svcDNS + ":443 -> Pod port 9443)"})
			return
		}
		if err != nil {
			last = err.Error()
		} else {
			last = "the API server admitted the object without the webhook's answer (it could not call it; failurePolicy Ignore)"
		}
		if ctx.Err() != nil {
			break
		}
		time.Sleep(time.Second)
	}
	r.add(Check{Name: "webhook-reachability", Status: Fail, Detail: "the API server could not call a webhook served by a Pod on port 9443: " + last,
		Fix: "allow the control plane to reach the nodes on TCP 9443 (GKE private clusters: a firewall rule from the master CIDR; EKS: the cluster security group); see docs/install.md"})
}

// pod renders a probe Pod that passes the restricted Pod Security level. Sandboxed probes get the gVisor
// RuntimeClass and the policy's node placement, like a tool's Pod.
func (r *run) pod(name, role string, sandboxed bool, args ...string) *corev1.Pod {
	lim := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{labelRole: role}},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To(int64(1)),
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(int64(65532)),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name: "probe", Image: r.Image, ImagePullPolicy: r.PullPolicy,
				Command: append([]string{r.Binary, "preflight", "probe"}, args...),
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
				Resources: corev1.ResourceRequirements{Limits: lim, Requests: lim},
			}},
		},
	}
	if sandboxed {
		p.Spec.RuntimeClassName = ptr.To(r.RuntimeClass)
		p.Spec.NodeSelector = r.NodeSelector
		p.Spec.Tolerations = r.Tolerations
	}
	return p
}

// probe runs a probe Pod to completion and decodes its report.
func (r *run) probe(ctx context.Context, p *corev1.Pod, report any) error {
	pods := r.Client.CoreV1().Pods(r.ns)
	if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create probe Pod %s: %w", p.Name, err)
	}
	deadline := time.Now().Add(r.Timeout)
	for {
		got, err := pods.Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("read probe Pod %s: %w", p.Name, err)
		}
		if got.Status.Phase == corev1.PodSucceeded || got.Status.Phase == corev1.PodFailed {
			log, err := pods.GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
			if err != nil {
				return fmt.Errorf("read probe Pod %s's log: %w", p.Name, err)
			}
			if got.Status.Phase == corev1.PodFailed {
				return fmt.Errorf("probe Pod %s failed: %s", p.Name, truncate(string(bytes.TrimSpace(log)), 300))
			}
			return decodeReport(log, report)
		}
		if why := stuck(got); why != "" {
			return fmt.Errorf("probe Pod %s cannot start: %s", p.Name, why)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("probe Pod %s did not finish within %s (phase %s%s)", p.Name, r.Timeout, got.Status.Phase, pending(got))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
}

func (r *run) waitRunning(ctx context.Context, name string) (string, error) {
	deadline := time.Now().Add(r.Timeout)
	for {
		got, err := r.Client.CoreV1().Pods(r.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		if got.Status.Phase == corev1.PodRunning && got.Status.PodIP != "" {
			// The process binds its port right after start; give it a moment before it is needed.
			time.Sleep(500 * time.Millisecond)
			return got.Status.PodIP, nil
		}
		if got.Status.Phase == corev1.PodFailed || got.Status.Phase == corev1.PodSucceeded {
			return "", fmt.Errorf("Pod %s ended (%s) instead of serving", name, got.Status.Phase)
		}
		if why := stuck(got); why != "" {
			return "", fmt.Errorf("Pod %s cannot start: %s", name, why)
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("Pod %s not running within %s (phase %s%s)", name, r.Timeout, got.Status.Phase, pending(got))
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// stuck names a waiting reason that will not resolve by itself.
func stuck(p *corev1.Pod) string {
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			switch w.Reason {
			case "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError", "CreateContainerError", "RunContainerError":
				return w.Reason + ": " + w.Message
			}
		}
	}
	return ""
}

func pending(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			return "; " + string(c.Type) + ": " + c.Message
		}
	}
	return ""
}

// selfSigned issues the probe webhook's certificate for dnsName, valid for an hour: self-signed, so it is
// its own CA bundle.
func selfSigned(dnsName string) (caPEM, certPEM, keyPEM []byte, err error) {
	pair, err := certs.Issue(certs.Spec{
		Serial: big.NewInt(time.Now().UnixNano()), CommonName: dnsName,
		DNSNames: []string{dnsName}, NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		CA: true,
	}, nil)
	if err != nil {
		return nil, nil, nil, err
	}
	if keyPEM, err = pair.KeyPEM(); err != nil {
		return nil, nil, nil, err
	}
	certPEM = pair.CertPEM()
	return certPEM, certPEM, keyPEM, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

func shortErr(s string) string {
	if s == "" {
		return "no error"
	}
	return truncate(s, 160)
}
