package webhook

import (
	"context"
	"errors"
	"net/http"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// Paths the webhook serves; the Helm chart's WebhookConfigurations point at them.
const (
	PathMutateJobs    = "/mutate-jobs"
	PathValidateJobs  = "/validate-jobs"
	PathValidatePods  = "/validate-pods"
	PathDenyPodAccess = "/deny-pod-access"
	PathDenyWorkloads = "/deny-workloads"
)

const (
	decisionAllowed = "allowed"
	decisionDenied  = "denied"
)

// Handlers returns every admission endpoint, keyed by path.
func Handlers(scheme *runtime.Scheme, c *Checker, m *Metrics) map[string]http.Handler {
	return map[string]http.Handler{
		PathMutateJobs:    admission.WithDefaulter[*batchv1.Job](scheme, &jobDefaulter{c: c, m: m}),
		PathValidateJobs:  admission.WithValidator[*batchv1.Job](scheme, &jobValidator{c: c, m: m}),
		PathValidatePods:  admission.WithValidator[*corev1.Pod](scheme, &podValidator{c: c, m: m}),
		PathDenyPodAccess: &admission.Webhook{Handler: denyPodAccess(m)},
		PathDenyWorkloads: &admission.Webhook{Handler: denyWorkloads(m)},
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
	inv, err := d.c.invocation(p, &job.ObjectMeta)
	if err != nil {
		return nil
	}
	if Inject(&job.Spec.Template.ObjectMeta, &job.Spec.Template.Spec, p, inv) {
		d.m.injections.Inc()
		ctrl.LoggerFrom(ctx).Info("injected credential agent", "job", job.Name, "tool", inv.Tool.Name, "scope", inv.Scope, "targetNamespace", inv.TargetNamespace)
	}
	return nil
}

type jobValidator struct {
	c *Checker
	m *Metrics
}

var _ admission.Validator[*batchv1.Job] = (*jobValidator)(nil)

func (v *jobValidator) ValidateCreate(ctx context.Context, job *batchv1.Job) (admission.Warnings, error) {
	return v.decide(ctx, job, nil)
}

func (v *jobValidator) ValidateUpdate(ctx context.Context, old, job *batchv1.Job) (admission.Warnings, error) {
	return v.decide(ctx, job, old)
}

func (v *jobValidator) ValidateDelete(context.Context, *batchv1.Job) (admission.Warnings, error) {
	return nil, nil
}

func (v *jobValidator) decide(ctx context.Context, job, old *batchv1.Job) (admission.Warnings, error) {
	start := time.Now()
	r := requestInfo(ctx)
	d, err := v.c.CheckJob(ctx, r, job, old)
	return record(ctx, v.m, "Job", job.Namespace, job.Name, r, start, d, err)
}

type podValidator struct {
	c *Checker
	m *Metrics
}

var _ admission.Validator[*corev1.Pod] = (*podValidator)(nil)

func (v *podValidator) ValidateCreate(ctx context.Context, pod *corev1.Pod) (admission.Warnings, error) {
	return v.decide(ctx, pod, nil)
}

func (v *podValidator) ValidateUpdate(ctx context.Context, old, pod *corev1.Pod) (admission.Warnings, error) {
	return v.decide(ctx, pod, old)
}

func (v *podValidator) ValidateDelete(context.Context, *corev1.Pod) (admission.Warnings, error) {
	return nil, nil
}

func (v *podValidator) decide(ctx context.Context, pod, old *corev1.Pod) (admission.Warnings, error) {
	start := time.Now()
	r := requestInfo(ctx)
	name := pod.Name
	if name == "" {
		name = pod.GenerateName
	}
	d, err := v.c.CheckPod(ctx, r, pod, old)
	return record(ctx, v.m, "Pod", pod.Namespace, name, r, start, d, err)
}

func requestInfo(ctx context.Context) Request {
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return Request{}
	}
	return Request{Operation: string(req.Operation), User: req.UserInfo.Username, DryRun: req.DryRun != nil && *req.DryRun}
}

// record logs and counts one decision and turns it into the typed handler's return values.
func record(ctx context.Context, m *Metrics, kind, ns, name string, r Request, start time.Time, d *Decision, err error) (admission.Warnings, error) {
	log := ctrl.LoggerFrom(ctx).WithValues("kind", kind, "namespace", ns, "name", name, "operation", r.Operation, "user", r.User, "dryRun", r.DryRun)
	m.latency.WithLabelValues(kind).Observe(time.Since(start).Seconds())
	var dn *Denial
	if errors.As(err, &dn) {
		m.decisions.WithLabelValues(kind, r.Operation, decisionDenied, dn.Rule).Inc()
		log.Info("admission denied", "rule", dn.Rule, "reason", oneLine(dn.Reason))
		return nil, err
	}
	if err != nil {
		m.decisions.WithLabelValues(kind, r.Operation, decisionDenied, "error").Inc()
		log.Error(err, "admission failed")
		return nil, err
	}
	m.decisions.WithLabelValues(kind, r.Operation, decisionAllowed, "").Inc()
	if d.ApprovalTokenID != "" {
		m.approvals.WithLabelValues(map[bool]string{true: "dry-run", false: "consumed"}[r.DryRun]).Inc()
	}
	log.Info("admission allowed", "tool", d.Tool, "approvalTokenID", d.ApprovalTokenID, "warnings", len(d.Warnings))
	return d.Warnings, nil
}

// denyPodAccess refuses exec, attach and port-forward into sandbox Pods and adding ephemeral (debug)
// containers to them: nothing may reach into a sandbox from outside.
func denyPodAccess(m *Metrics) admission.HandlerFunc {
	return func(ctx context.Context, req admission.Request) admission.Response {
		what := req.SubResource
		rule := "no-pod-access"
		msg := "exec, attach and port-forward into sandbox Pods are not allowed"
		if what == "ephemeralcontainers" {
			rule, msg = "no-ephemeral-containers", "ephemeral (debug) containers cannot be added to sandbox Pods"
		}
		m.decisions.WithLabelValues("Pod/"+what, string(req.Operation), decisionDenied, rule).Inc()
		ctrl.LoggerFrom(ctx).Info("admission denied", "kind", "Pod/"+what, "namespace", req.Namespace, "name", req.Name, "user", req.UserInfo.Username, "rule", rule)
		return admission.Denied((&Denial{Rule: rule, Reason: msg}).Error())
	}
}

// denyWorkloads refuses every other workload kind in sandbox namespaces: sandbox work runs only as Jobs
// that the webhook can check, never as Deployments, CronJobs or bare ReplicaSets.
func denyWorkloads(m *Metrics) admission.HandlerFunc {
	return func(ctx context.Context, req admission.Request) admission.Response {
		kind := req.Kind.Kind
		m.decisions.WithLabelValues(kind, string(req.Operation), decisionDenied, "jobs-only").Inc()
		ctrl.LoggerFrom(ctx).Info("admission denied", "kind", kind, "namespace", req.Namespace, "name", req.Name, "user", req.UserInfo.Username, "rule", "jobs-only")
		return admission.Denied((&Denial{Rule: "jobs-only", Reason: kind + " is not allowed in a sandbox namespace; sandbox work runs only as agent-sandbox Jobs"}).Error())
	}
}
