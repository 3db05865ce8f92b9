package webhook

import (
	"context"
	"errors"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/ledger"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/rules"
)

// podLedgerMargin keeps a Job's Pod record well past the Job's own life: the Job is deleted
// ttlSecondsAfterFinished (an hour) after its deadline at the latest, and a record must outlive the Job
// it protects.
const podLedgerMargin = 2 * time.Hour

// CheckPod decides on a Pod in a sandbox namespace. One admitted Job makes one Pod, once: the Pod must be
// created by the Job controller, for an existing Job of the same namespace that is neither suspended nor
// finished nor being deleted and never had a Pod before (recorded in the shared ledger), and it must be
// exactly the Pod the policy renders for that Job.
func (c *Checker) CheckPod(ctx context.Context, req Request, obj, old object) (*Decision, error) {
	p, err := c.loaded()
	if err != nil {
		return nil, err
	}
	if req.Operation == "UPDATE" {
		if old != nil && isWarm(old.labels()) && old.annotations()[contract.AnnotationClaim] == "" && obj.annotations()[contract.AnnotationClaim] != "" {
			return c.checkClaim(ctx, p, req, obj, old)
		}
		return checkUpdate("Pod", obj, old, contains(orDefault(c.Identities.GCUsers, DefaultGCUsers), req.User))
	}
	users := c.Identities.JobControllerUsers
	if len(users) == 0 {
		users = DefaultJobControllerUsers
	}
	if !contains(users, req.User) {
		return nil, deny(rules.PodsOnlyFromJobs, "Pods in a sandbox namespace are created only by the Job controller, not by %s; create a Job through agent-sandbox instead", req.User)
	}
	ownerName, ownerUID, ok := controllerJob(obj)
	if !ok {
		return nil, deny(rules.PodsOnlyFromJobs, "the Pod has no controlling Job owner reference")
	}
	if c.Cluster == nil {
		return nil, deny(rules.OwnerJob, "the webhook cannot read Jobs to check this Pod's owner")
	}
	job, err := c.Cluster.GetJob(ctx, req.Namespace, ownerName)
	if err != nil {
		return nil, deny(rules.OwnerJob, "cannot read owner Job %s: %v", ownerName, err)
	}
	if string(job.UID) != ownerUID {
		return nil, deny(rules.OwnerJob, "owner reference names Job %s with UID %s, but that Job has UID %s", ownerName, ownerUID, job.UID)
	}
	if err := runnable(job); err != nil {
		return nil, err
	}
	if err := c.jobAdmitted(ctx, job); err != nil {
		return nil, err
	}
	want, tool, err := expectedOwner(p, job, c.claimKeys())
	if err != nil {
		return nil, err
	}
	if err := c.evaluate(ctx, p, obj, "Pod", req.Operation); err != nil {
		return nil, err
	}
	if want.Name != job.Name {
		return nil, deny(rules.OwnerJob, "the owner Job %s is not a Job the policy renders (it would be named %s)", job.Name, want.Name)
	}
	if err := exactPod(obj, want, job); err != nil {
		return nil, err
	}
	if !req.DryRun {
		if c.Pods == nil {
			return nil, deny(rules.OnePodPerJob, "the webhook has no Pod ledger, so it cannot guarantee one Pod per Job")
		}
		deadline := time.Duration(0)
		if job.Spec.ActiveDeadlineSeconds != nil {
			deadline = time.Duration(*job.Spec.ActiveDeadlineSeconds) * time.Second
		}
		err := c.Pods.RecordPod(ctx, job.UID, job.CreationTimestamp.Add(deadline+podLedgerMargin))
		switch {
		case errors.Is(err, ledger.ErrSecondPod):
			return nil, deny(rules.OnePodPerJob, "Job %s already had its Pod; one admitted Job runs once, whoever asks for a second Pod", job.Name)
		case err != nil:
			return nil, deny(rules.OnePodPerJob, "cannot record the Pod of Job %s: %v", job.Name, err)
		}
	}
	return &Decision{Tool: tool}, nil
}

// jobAdmitted checks that the webhook admitted job: its Pod ledger holds the Job's UID (recordJob). The Job
// controller makes a Job's Pod whenever it can, also long after the Job was made: a Job made while no
// webhook was registered, with an approval token nobody signed (its signature is checked only when the Job
// is admitted), would otherwise get its exact Pod, and with it a credential, once the webhook is back.
func (c *Checker) jobAdmitted(ctx context.Context, job *batchv1.Job) error {
	if c.Pods == nil {
		return nil // CheckPod refuses every Pod but a dry run's without a Pod ledger
	}
	ok, err := c.Pods.JobRecorded(ctx, job.UID)
	switch {
	case err != nil:
		return deny(rules.OwnerJob, "cannot look up Job %s in the Pod ledger: %v", job.Name, err)
	case !ok:
		return deny(rules.OwnerJob, "the webhook never admitted Job %s (its Pod ledger has no entry for UID %s): it was made while no webhook was registered, and gets no Pod", job.Name, job.UID)
	}
	return nil
}

// expectedOwner renders what a Pod's owner Job must be: a call's Job from its declared tool and
// parameters, or a warm Job of its tool.
func expectedOwner(p *policy.Compiled, job *batchv1.Job, claimKeys string) (*batchv1.Job, string, error) {
	if isWarm(job.Labels) {
		t, err := warmTool(p, job.Labels)
		if err != nil {
			return nil, "", err
		}
		want, err := expectedWarmJob(p, t, job.Name, claimKeys)
		return want, t.Name, err
	}
	inv, err := invocation(p, job.Labels, job.Annotations)
	if err != nil {
		return nil, "", err
	}
	want, err := expectedJob(p, inv, job.Labels[contract.LabelRequestID], job.Annotations[contract.AnnotationApprovalToken], job.Annotations[contract.AnnotationAuditHead])
	if err != nil {
		return nil, "", deny(rules.Render, "%v", err)
	}
	return want, inv.Tool.Name, nil
}

// runnable refuses a Pod for a Job that should not be running one: suspended, finished or going away.
func runnable(job *batchv1.Job) error {
	switch {
	case job.DeletionTimestamp != nil:
		return deny(rules.OwnerJob, "Job %s is being deleted", job.Name)
	case job.Spec.Suspend != nil && *job.Spec.Suspend:
		return deny(rules.OwnerJob, "Job %s is suspended", job.Name)
	}
	for _, cond := range job.Status.Conditions {
		if cond.Status != corev1.ConditionTrue {
			continue
		}
		switch cond.Type {
		case batchv1.JobComplete, batchv1.JobFailed, batchv1.JobFailureTarget, batchv1.JobSuccessCriteriaMet:
			return deny(rules.OwnerJob, "Job %s has finished (%s)", job.Name, cond.Type)
		}
	}
	return nil
}

func controllerJob(obj object) (name, uid string, ok bool) {
	refs, _ := obj.meta()["ownerReferences"].([]any)
	for _, r := range refs {
		m, _ := r.(map[string]any)
		if c, _ := m["controller"].(bool); !c {
			continue
		}
		if m["apiVersion"] != "batch/v1" || m["kind"] != "Job" {
			return "", "", false
		}
		name, _ = m["name"].(string)
		uid, _ = m["uid"].(string)
		return name, uid, name != "" && uid != ""
	}
	return "", "", false
}

// isNotFound reports a read that found nothing.
func isNotFound(err error) bool { return apierrors.IsNotFound(err) }
