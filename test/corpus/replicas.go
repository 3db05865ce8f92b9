package corpus

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// Replicas reads each webhook replica's own metrics, straight from its Pod (not through the Service, which
// would answer from any one of them), with a scrape identity of its own: a ServiceAccount bound to the
// chart's metrics-reader ClusterRole, whose token the webhook's secure metrics endpoint authenticates and
// authorizes like a Prometheus'. It verifies the endpoint's certificate against the CA of the webhook's
// TLS Secret for the webhook Service's name.
type Replicas struct {
	admin      kubernetes.Interface
	namespace  string
	deployment string
	port       int32
	token      string
	client     *http.Client
	cleanup    func(context.Context)
}

// ScraperServiceAccount is the scrape identity Replicas creates in the webhook's namespace.
const ScraperServiceAccount = "agent-sandbox-corpus-scraper"

// NewReplicas creates the scrape identity for the webhook Deployment deployment in namespace (the chart's
// names: the Service and TLS Secret are <deployment> and <deployment>-tls, the ClusterRole
// <namespace>:<deployment>-metrics-reader). Close removes it.
func NewReplicas(ctx context.Context, admin kubernetes.Interface, namespace, deployment string) (*Replicas, error) {
	r := &Replicas{admin: admin, namespace: namespace, deployment: deployment}
	dep, err := admin.AppsV1().Deployments(namespace).Get(ctx, deployment, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("the webhook Deployment: %w", err)
	}
	for _, c := range dep.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == "metrics" {
				r.port = p.ContainerPort
			}
		}
	}
	if r.port == 0 {
		return nil, fmt.Errorf("the webhook Deployment %s/%s has no metrics port (metrics.enabled=false?)", namespace, deployment)
	}
	secret, err := admin.CoreV1().Secrets(namespace).Get(ctx, deployment+"-tls", metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("the webhook's TLS Secret: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(secret.Data["ca.crt"]) {
		return nil, fmt.Errorf("the webhook's TLS Secret %s-tls has no usable ca.crt", deployment)
	}
	r.client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: deployment + "." + namespace + ".svc", MinVersion: tls.VersionTLS12}}}

	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: ScraperServiceAccount, Namespace: namespace}}
	if _, err := admin.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create the scrape identity: %w", err)
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: ScraperServiceAccount},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: namespace + ":" + deployment + "-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: ScraperServiceAccount, Namespace: namespace}},
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("bind the scrape identity: %w", err)
	}
	r.cleanup = func(ctx context.Context) {
		_ = admin.RbacV1().ClusterRoleBindings().Delete(ctx, ScraperServiceAccount, metav1.DeleteOptions{})
		_ = admin.CoreV1().ServiceAccounts(namespace).Delete(ctx, ScraperServiceAccount, metav1.DeleteOptions{})
	}
	tr, err := admin.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, ScraperServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(600))}}, metav1.CreateOptions{})
	if err != nil {
		r.Close(ctx)
		return nil, fmt.Errorf("a token for the scrape identity: %w", err)
	}
	r.token = tr.Status.Token
	return r, nil
}

// Close removes the scrape identity.
func (r *Replicas) Close(ctx context.Context) {
	if r.cleanup != nil {
		r.cleanup(ctx)
	}
}

// ReplicaCounts are one replica's counters that an approval race moves.
type ReplicaCounts struct {
	// Consumed is agent_sandbox_approvals_total{result="consumed"}: approvals recorded in the ledger.
	Consumed float64
	// Refused is agent_sandbox_admission_decisions_total{kind="Job",operation="CREATE",decision="denied",
	// rule="approval"}: Jobs refused for their approval (a replay among them).
	Refused float64
}

// Scrape reads every ready webhook replica's counters, by Pod name. A replica whose endpoint refuses the
// scrape identity (401/403) is an error: the scrape proves the endpoint is protected and the identity works.
func (r *Replicas) Scrape(ctx context.Context) (map[string]ReplicaCounts, error) {
	dep, err := r.admin.AppsV1().Deployments(r.namespace).Get(ctx, r.deployment, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	pods, err := r.admin.CoreV1().Pods(r.namespace).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(dep.Spec.Selector.MatchLabels).String()})
	if err != nil {
		return nil, err
	}
	out := map[string]ReplicaCounts{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Status.PodIP == "" || !podReady(&p) {
			continue
		}
		c, err := r.scrapePod(ctx, p.Status.PodIP)
		if err != nil {
			return nil, fmt.Errorf("replica %s: %w", p.Name, err)
		}
		out[p.Name] = c
	}
	if len(out) == 0 {
		return nil, errors.New("no ready webhook replica to scrape")
	}
	return out, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func (r *Replicas) scrapePod(ctx context.Context, ip string) (ReplicaCounts, error) {
	url := "https://" + net.JoinHostPort(ip, strconv.Itoa(int(r.port))) + "/metrics"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return ReplicaCounts{}, err
	}
	req.Header.Set("Authorization", "Bearer "+r.token)
	resp, err := r.client.Do(req)
	if err != nil {
		return ReplicaCounts{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return ReplicaCounts{}, fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return parseReplicaCounts(resp.Body)
}

// parseReplicaCounts reads the two counters from a Prometheus text exposition.
func parseReplicaCounts(r io.Reader) (ReplicaCounts, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return ReplicaCounts{}, fmt.Errorf("the metrics: %w", err)
	}
	var c ReplicaCounts
	if f := families["agent_sandbox_approvals_total"]; f != nil {
		for _, m := range f.GetMetric() {
			if labelsOf(m.GetLabel()) == "result=consumed" {
				c.Consumed += m.GetCounter().GetValue()
			}
		}
	}
	if f := families["agent_sandbox_admission_decisions_total"]; f != nil {
		for _, m := range f.GetMetric() {
			if labelsOf(m.GetLabel()) == "decision=denied,kind=Job,operation=CREATE,rule=approval" {
				c.Refused += m.GetCounter().GetValue()
			}
		}
	}
	return c, nil
}

// labelsOf is a metric's labels as "name=value,..." sorted by name.
func labelsOf(pairs []*dto.LabelPair) string {
	s := make([]string, 0, len(pairs))
	for _, p := range pairs {
		s = append(s, p.GetName()+"="+p.GetValue())
	}
	sort.Strings(s)
	return strings.Join(s, ",")
}

// RaceRound is one round of RaceAcrossReplicas: how many of the racing Jobs were admitted, and what each
// replica decided of them (the difference of its counters across the round).
type RaceRound struct {
	Admitted int
	Replicas map[string]ReplicaCounts
}

// Both reports whether more than one replica decided on the round's Jobs.
func (r RaceRound) Both() bool {
	n := 0
	for _, c := range r.Replicas {
		if c.Consumed+c.Refused > 0 {
			n++
		}
	}
	return n > 1
}

func (r RaceRound) String() string {
	names := make([]string, 0, len(r.Replicas))
	for n := range r.Replicas {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		c := r.Replicas[n]
		parts[i] = fmt.Sprintf("%s consumed %.0f, refused %.0f", n, c.Consumed, c.Refused)
	}
	return fmt.Sprintf("%d admitted; %s", r.Admitted, strings.Join(parts, "; "))
}

// RaceAcrossReplicas races n Jobs carrying one approval (Race) in up to rounds rounds, scraping every
// replica before and after each, until a round in which more than one replica decided. Every round must
// admit exactly one Job, and the replicas' counters must account for each of the n Jobs: exactly one
// consumption in all and n-1 refusals for the approval. It returns every round; the error names the first
// round that broke that, or says that no round reached two replicas.
func (e *Env) RaceAcrossReplicas(ctx context.Context, reps *Replicas, rounds, n int) ([]RaceRound, error) {
	var out []RaceRound
	for i := range rounds {
		before, err := reps.Scrape(ctx)
		if err != nil {
			return out, err
		}
		admitted, _ := e.Race(ctx, n)
		after, err := reps.Scrape(ctx)
		if err != nil {
			return out, err
		}
		round := RaceRound{Admitted: admitted, Replicas: map[string]ReplicaCounts{}}
		var consumed, refused float64
		for name, a := range after {
			b, ok := before[name]
			if !ok {
				return out, fmt.Errorf("round %d: replica %s appeared during the race; run again", i+1, name)
			}
			d := ReplicaCounts{Consumed: a.Consumed - b.Consumed, Refused: a.Refused - b.Refused}
			round.Replicas[name] = d
			consumed += d.Consumed
			refused += d.Refused
		}
		out = append(out, round)
		if admitted != 1 || consumed != 1 || refused != float64(n-1) {
			return out, fmt.Errorf("round %d of %d racing Jobs with one approval: %s (want 1 admitted, 1 consumed and %d refused in all)", i+1, n, round, n-1)
		}
		if round.Both() {
			return out, nil
		}
	}
	return out, fmt.Errorf("in %d rounds of %d Jobs every race was decided by one replica; the other never took part", rounds, n)
}
