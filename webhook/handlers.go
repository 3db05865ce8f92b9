package webhook

import (
	"context"
	"errors"
	"net/http"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/agent-sandbox/agent-sandbox/internal/rules"
	"github.com/agent-sandbox/agent-sandbox/internal/scrub"
)

// Paths the webhook serves; the Helm chart's WebhookConfigurations point at them.
const (
	PathMutateJobs         = "/mutate-jobs"
	PathValidateJobs       = "/validate-jobs"
	PathValidatePods       = "/validate-pods"
	PathSubresources       = "/validate-subresources"
	PathDenyWorkloads      = "/deny-workloads"
	PathSandboxNamespace   = "/validate-sandbox-namespace"
	PathProtectedResources = "/validate-protected"
	PathSecrets            = "/validate-secrets"
	PathConfigMaps         = "/validate-configmaps"
)

const (
	decisionAllowed = "allowed"
	decisionDenied  = "denied"
)

// Handlers returns every admission endpoint, keyed by path.
func Handlers(scheme *runtime.Scheme, c *Checker, m *Metrics) map[string]http.Handler {
	raw := func(kind string, check func(context.Context, Request, object, object) (*Decision, error)) http.Handler {
		return &admission.Webhook{Handler: rawHandler(m, kind, check)}
	}
	return map[string]http.Handler{
		PathMutateJobs:   admission.WithDefaulter[*batchv1.Job](scheme, &jobDefaulter{c: c, m: m}),
		PathMutatePods:   claimSigningHandler(c), // claimsign.go
		PathValidateJobs: &admission.Webhook{Handler: jobHandler(c, m)},
		PathValidatePods: raw("Pod", c.CheckPod),
		PathSubresources: raw("subresource", c.CheckSubresource),
		PathDenyWorkloads: raw("workload", func(_ context.Context, r Request, _, _ object) (*Decision, error) {
			return nil, deny(rules.JobsOnly, "%s are not allowed in a sandbox namespace; sandbox work runs only as agent-sandbox Jobs", r.Resource)
		}),
		PathSandboxNamespace: raw("Namespace", c.CheckNamespace),
		PathProtectedResources: raw("protected", func(ctx context.Context, r Request, o, _ object) (*Decision, error) {
			return c.CheckProtected(ctx, r, o)
		}),
		PathSecrets: raw("Secret", func(ctx context.Context, r Request, o, _ object) (*Decision, error) {
			return c.CheckSecret(ctx, r, o)
		}),
		PathConfigMaps: raw("ConfigMap", func(ctx context.Context, r Request, o, _ object) (*Decision, error) {
			return c.CheckConfigMap(ctx, r, o)
		}),
	}
}

// rawHandler decodes the request's objects as the API server sent them (no typed decoding that would
// drop fields this program does not know) and turns a decision into the admission response.
func rawHandler(m *Metrics, kind string, check func(context.Context, Request, object, object) (*Decision, error)) admission.HandlerFunc {
	return func(ctx context.Context, req admission.Request) admission.Response {
		start := time.Now()
		r := requestOf(req)
		var obj, old object
		var err error
		if len(req.Object.Raw) > 0 {
			obj, err = decodeObject(req.Object.Raw)
		}
		if err == nil && len(req.OldObject.Raw) > 0 {
			old, err = decodeObject(req.OldObject.Raw)
		}
		var d *Decision
		if err != nil {
			err = deny(rules.Decode, "%v", err)
		} else {
			d, err = check(ctx, r, obj, old)
		}
		warnings, err := record(ctx, m, kind, r, start, d, err)
		if err != nil {
			return admission.Denied(err.Error())
		}
		return admission.Allowed("").WithWarnings(warnings...)
	}
}

// jobHandler hands the Job's bytes to CheckJobRaw, which decodes them once and decides.
func jobHandler(c *Checker, m *Metrics) admission.HandlerFunc {
	return func(ctx context.Context, req admission.Request) admission.Response {
		start := time.Now()
		r := requestOf(req)
		var d *Decision
		var err error
		if r.Operation == "DELETE" {
			d, err = c.CheckJobDelete(ctx, r)
		} else {
			d, err = c.CheckJobRaw(ctx, r, req.Object.Raw, req.OldObject.Raw)
		}
		warnings, err := record(ctx, m, "Job", r, start, d, err)
		if err != nil {
			return admission.Denied(err.Error())
		}
		return admission.Allowed("").WithWarnings(warnings...)
	}
}

func requestOf(req admission.Request) Request {
	var opts map[string]any
	if len(req.Options.Raw) > 0 {
		opts, _ = decodeObject(req.Options.Raw) // undecodable options read as none: the strictest reading
	}
	return Request{
		Options:     opts,
		Operation:   string(req.Operation),
		User:        req.UserInfo.Username,
		Groups:      req.UserInfo.Groups,
		DryRun:      req.DryRun != nil && *req.DryRun,
		Name:        req.Name,
		Namespace:   req.Namespace,
		Resource:    req.Resource.Resource,
		SubResource: req.SubResource,
	}
}

// jobDefaulter injects the credential agent into sandbox Jobs on CREATE. It never denies: a Job it cannot
// make sense of is left unchanged for the validating webhook to refuse with a reason.
type jobDefaulter struct {
	c *Checker
	m *Metrics
}

var _ admission.Defaulter[*batchv1.Job] = (*jobDefaulter)(nil)

func (d *jobDefaulter) Default(ctx context.Context, job *batchv1.Job) error {
	req, err := admission.RequestFromContext(ctx)
	if err != nil || req.Operation != admissionv1.Create {
		return nil
	}
	p := d.c.Policy()
	if p == nil {
		return nil
	}
	if isWarm(job.Labels) {
		t, err := warmTool(p, job.Labels)
		if err == nil && InjectWarm(&job.Spec.Template.ObjectMeta, &job.Spec.Template.Spec, p, t, d.c.claimKeys()) {
			d.m.injections.Inc()
			ctrl.LoggerFrom(ctx).Info("injected credential agent into warm Job", "job", job.Name, "tool", t.Name)
		}
		return nil
	}
	inv, err := invocation(p, job.Labels, job.Annotations)
	if err != nil {
		return nil
	}
	if Inject(&job.Spec.Template.ObjectMeta, &job.Spec.Template.Spec, p, inv) {
		d.m.injections.Inc()
		ctrl.LoggerFrom(ctx).Info("injected credential agent", "job", job.Name, "tool", inv.Tool.Name, "scope", inv.Scope, "targetNamespace", inv.TargetNamespace)
	}
	return nil
}

// record logs and counts one decision and turns it into warnings or a denial.
func record(ctx context.Context, m *Metrics, kind string, r Request, start time.Time, d *Decision, err error) ([]string, error) {
	name := r.Name
	log := ctrl.LoggerFrom(ctx).WithValues("kind", kind, "namespace", r.Namespace, "name", name, "operation", r.Operation,
		"subresource", r.SubResource, "user", r.User, "dryRun", r.DryRun)
	m.latency.WithLabelValues(kind).Observe(time.Since(start).Seconds())
	var dn *Denial
	if errors.As(err, &dn) {
		m.decisions.WithLabelValues(kind, r.Operation, decisionDenied, dn.Rule).Inc()
		log.Info("admission denied", "rule", dn.Rule, "reason", scrub.String(oneLine(dn.Reason)))
		return nil, err
	}
	if err != nil {
		m.decisions.WithLabelValues(kind, r.Operation, decisionDenied, "error").Inc()
		log.Error(errors.New(scrub.String(oneLine(err.Error()))), "admission failed")
		return nil, err
	}
	m.decisions.WithLabelValues(kind, r.Operation, decisionAllowed, "").Inc()
	if d.Cached {
		m.cachedRenderings.Inc()
	}
	if len(d.ApprovalTokenIDs) > 0 {
		m.approvals.WithLabelValues(map[bool]string{true: "dry-run", false: "consumed"}[r.DryRun]).Inc()
	}
	log.V(1).Info("admission allowed", "tool", d.Tool, "approvalTokenIDs", d.ApprovalTokenIDs, "warnings", len(d.Warnings))
	if len(d.ApprovalTokenIDs) > 0 {
		log.Info("approval consumed", "tool", d.Tool, "approvalTokenIDs", d.ApprovalTokenIDs)
	}
	return d.Warnings, nil
}
