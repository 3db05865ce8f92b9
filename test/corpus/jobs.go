package corpus

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/test/corpus/cases"
)

// jobCases are the unsafe Jobs of test/corpus/cases, each submitted as the attacker: the Job the MCP server
// would submit, or (cases.Injected) the Job as it looks after the webhook's injection, changed by the case.
func (e *Env) jobCases() []Case {
	var out []Case
	for _, c := range cases.Jobs() {
		base := func() *batchv1.Job { return e.Job(cases.Tool, cases.PodParams(), "") }
		if c.Base == cases.Injected {
			base = func() *batchv1.Job { return e.Injected(cases.Tool, cases.PodParams()) }
		}
		out = append(out, e.jobCase(c.Class, c.Name, c.Rule, c.Mutate, base))
	}
	return out
}

// approvalCases break invariant 5 with terraform_apply, which always needs a signed approval: the
// one-token cases of test/corpus/cases, then those of several approvers' tokens and of replays, which need
// a token admitted first.
func (e *Env) approvalCases() []Case {
	apply := func(token string) func() *batchv1.Job {
		return func() *batchv1.Job { return e.Job(cases.ApplyTool, ApplyParams(), token) }
	}
	none := func(*batchv1.Job) {}
	good := func() string { return e.Token(e.Approver, cases.ApplyTool, ApplyParams(), nil) }
	var out []Case
	for _, a := range cases.Approvals() {
		out = append(out, Case{Class: "approval", Name: a.Name, Rule: a.Rule, Says: a.Says, Submit: func(ctx context.Context) error {
			j, err := e.approvalJob(a)
			if err != nil {
				return fmt.Errorf("setup: %w", err)
			}
			_, err = e.CreateJob(ctx, j, false)
			return err
		}})
	}
	c := func(name, rule string, m func(*batchv1.Job), base func() *batchv1.Job) Case {
		return e.jobCase("approval", name, rule, m, base)
	}
	out = append(out,
		// A plan whose approvers' tools found it needs two approvers (approvals_required 2).
		c("apply with one approval where the plan needs two approvers", "approval: 1 of 2 approvals: this plan needs 2 distinct approvers", none,
			apply(contract.JoinApprovalTokens(e.approvalsOf(newID(), 2, e.Approver)))),
		c("apply with the same approver's approval twice where the plan needs two", "approval: 1 of 2 approvals: this plan needs 2 distinct approvers; the same approver twice counts once", none,
			apply(contract.JoinApprovalTokens(e.approvalsOf(newID(), 2, e.Approver, e.Approver)))),
		c("apply with two approvals, one of them for another request", "approval: the approvals are for different requests", none,
			apply(contract.JoinApprovalTokens(append(e.approvalsOf(newID(), 2, e.Approver), e.approvalsOf(newID(), 2, e.Approver)...)))),
	)
	out = append(out, e.twoApproverReplayCases()...)
	return append(out, Case{Class: "approval", Name: "apply replaying a used token", Rule: "approval", Submit: func(ctx context.Context) error {
		tok := good()
		if _, err := e.CreateJob(ctx, apply(tok)(), false); err != nil {
			return fmt.Errorf("setup: the first use of a good token was refused: %w", err)
		}
		// The replay comes with a fresh request ID, as a second call would.
		_, err := e.CreateJob(ctx, apply(tok)(), false)
		return err
	}})
}

// approvalJob is the Job of an approval case: ApplyTool's Job for ApplyParams carrying the case's token.
func (e *Env) approvalJob(a cases.Approval) (*batchv1.Job, error) {
	var err error
	token := a.Token(func(k cases.Key, params map[string]any, claims func(*approval.Claims)) string {
		key := e.Approver
		switch k {
		case cases.Untrusted:
			key = e.Other
		case cases.Impostor:
			key, err = approval.GenerateKey(e.Approver.KeyID())
			if err != nil {
				return ""
			}
		}
		return e.Token(key, cases.ApplyTool, params, claims)
	})
	if err != nil {
		return nil, err
	}
	j := e.Job(cases.ApplyTool, ApplyParams(), token)
	a.Change(j, sandbox.JobName)
	return j, nil
}

func newID() string {
	id, err := approval.NewRequestID()
	if err != nil {
		panic(err)
	}
	return id
}

// approvalsOf signs, with each key, an approval of the one request id for terraform_apply with ApplyParams,
// asking for need approvers.
func (e *Env) approvalsOf(id string, need int, keys ...*approval.PrivateKey) []string {
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, e.Token(k, "terraform_apply", ApplyParams(), func(c *approval.Claims) { c.Subject, c.ApprovalsRequired = id, need }))
	}
	return out
}

// twoApproverReplayCases get a Job admitted with two distinct approvers' tokens (the setup fails the case if
// it is refused) and then replay either token, with a fresh token of the other approver for the same request:
// refused, whichever. They need Env.Second; without it there are none.
func (e *Env) twoApproverReplayCases() []Case {
	if e.Second == nil {
		return nil
	}
	replay := func(name string, used int) Case {
		return Case{Class: "approval", Name: name, Rule: "approval: this approval was already used", Submit: func(ctx context.Context) error {
			id := newID()
			pair := e.approvalsOf(id, 2, e.Approver, e.Second)
			if _, err := e.CreateJob(ctx, e.Job("terraform_apply", ApplyParams(), contract.JoinApprovalTokens(pair)), false); err != nil {
				return fmt.Errorf("setup: two distinct approvers' tokens were refused: %w", err)
			}
			again := e.approvalsOf(id, 2, e.Approver, e.Second)
			again[used] = pair[used]
			_, err := e.CreateJob(ctx, e.Job("terraform_apply", ApplyParams(), contract.JoinApprovalTokens(again)), false)
			return err
		}}
	}
	return []Case{
		replay("apply with two approvers, then the first approver's used token again", 0),
		replay("apply with two approvers, then the second approver's used token again", 1),
	}
}

// workloadCases make Pods in the sandbox namespace through other workload kinds.
func (e *Env) workloadCases() []Case {
	tmpl := func() corev1.PodTemplateSpec {
		j := e.Job("k8s_get_pod_status", PodParams(), "")
		t := j.Spec.Template
		t.Labels = map[string]string{"app": "sneaky"}
		t.Spec.RestartPolicy = corev1.RestartPolicyAlways
		return t
	}
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "sneaky"}}
	meta := func() metav1.ObjectMeta { return metav1.ObjectMeta{Name: "sneaky-" + e.Run} }
	c := func(name string, f func(ctx context.Context) error) Case {
		return Case{Class: "workload", Name: name, Rule: "jobs-only", Submit: f}
	}
	apps := func() appsInterface { return e.Attacker.AppsV1() }
	return []Case{
		c("Deployment in the sandbox namespace", func(ctx context.Context) error {
			_, err := apps().Deployments(e.Namespace()).Create(ctx, &appsv1.Deployment{ObjectMeta: meta(), Spec: appsv1.DeploymentSpec{Selector: sel, Template: tmpl()}}, metav1.CreateOptions{})
			return err
		}),
		c("ReplicaSet in the sandbox namespace", func(ctx context.Context) error {
			_, err := apps().ReplicaSets(e.Namespace()).Create(ctx, &appsv1.ReplicaSet{ObjectMeta: meta(), Spec: appsv1.ReplicaSetSpec{Selector: sel, Template: tmpl()}}, metav1.CreateOptions{})
			return err
		}),
		c("StatefulSet in the sandbox namespace", func(ctx context.Context) error {
			_, err := apps().StatefulSets(e.Namespace()).Create(ctx, &appsv1.StatefulSet{ObjectMeta: meta(), Spec: appsv1.StatefulSetSpec{Selector: sel, Template: tmpl()}}, metav1.CreateOptions{})
			return err
		}),
		c("DaemonSet in the sandbox namespace", func(ctx context.Context) error {
			_, err := apps().DaemonSets(e.Namespace()).Create(ctx, &appsv1.DaemonSet{ObjectMeta: meta(), Spec: appsv1.DaemonSetSpec{Selector: sel, Template: tmpl()}}, metav1.CreateOptions{})
			return err
		}),
		c("CronJob in the sandbox namespace", func(ctx context.Context) error {
			j := e.Job("k8s_get_pod_status", PodParams(), "")
			cj := &batchv1.CronJob{ObjectMeta: meta(), Spec: batchv1.CronJobSpec{Schedule: "* * * * *",
				JobTemplate: batchv1.JobTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: j.Labels, Annotations: j.Annotations}, Spec: j.Spec}}}
			_, err := e.Attacker.BatchV1().CronJobs(e.Namespace()).Create(ctx, cj, metav1.CreateOptions{})
			return err
		}),
		c("ReplicationController in the sandbox namespace", func(ctx context.Context) error {
			t := tmpl()
			rc := &corev1.ReplicationController{ObjectMeta: meta(), Spec: corev1.ReplicationControllerSpec{Selector: map[string]string{"app": "sneaky"}, Template: &t}}
			_, err := e.Attacker.CoreV1().ReplicationControllers(e.Namespace()).Create(ctx, rc, metav1.CreateOptions{})
			return err
		}),
	}
}
