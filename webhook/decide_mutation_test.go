package webhook

// Objects for the checks of the decision around the exactness comparison (CheckJob, checkUpdate, CheckPod)
// that no other test holds the webhook to. `make mutate-exactness` removes each check in turn (its decide/
// mutations) and requires some test to fail.

import (
	"context"
	"errors"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// failingPodLedger cannot record a Pod, as when the ledger's ConfigMap cannot be written.
type failingPodLedger struct{}

func (failingPodLedger) RecordPod(context.Context, types.UID, time.Time) error {
	return errors.New("the API server is unavailable")
}

func (failingPodLedger) RecordJob(context.Context, types.UID, time.Time) error {
	return errors.New("the API server is unavailable")
}

// JobRecorded answers from what is already stored: reading works, writing does not.
func (failingPodLedger) JobRecorded(context.Context, types.UID) (bool, error) {
	return true, nil
}

func (failingPodLedger) PodRecorded(context.Context, types.UID) (bool, error) {
	return false, errors.New("the API server is unavailable")
}

// TestCheckPodRefusesOwnerAndLedger: the checks of CheckPod besides exactPod, each alone. The Pod is the
// exact Pod of its owner Job in every case; what is wrong is the Job, or the ledger.
func TestCheckPodRefusesOwnerAndLedger(t *testing.T) {
	f := newFixture(t)
	condition := func(c batchv1.JobConditionType) func(j *batchv1.Job) {
		return func(j *batchv1.Job) {
			j.Status.Conditions = []batchv1.JobCondition{{Type: c, Status: corev1.ConditionTrue}}
		}
	}
	for _, tc := range []struct {
		name   string
		job    func(j *batchv1.Job) // applied before the API server's additions
		ledger PodLedger
		rule   string
	}{
		// The Job controller adds these conditions before the final Complete or Failed one, and makes no
		// new Pod once they are there.
		{"Job marked to fail (FailureTarget)", condition(batchv1.JobFailureTarget), nil, "owner-job"},
		{"Job that met its success criteria", condition(batchv1.JobSuccessCriteriaMet), nil, "owner-job"},
		// A Job admitted under another name (say while the webhook was not called) is not a Job the policy
		// renders, even when its Pod is exactly its template.
		{"owner Job not named after its rendering", func(j *batchv1.Job) { j.Name = "as-other" }, nil, "owner-job"},
		// No record, no Pod: a ledger that cannot record does not let a second Pod through.
		{"Pod ledger unavailable", nil, failingPodLedger{}, "one-pod-per-job"},
		// A Job made while no webhook was registered: exact, but its UID is not in the Pod ledger.
		{"owner Job the webhook never admitted", nil, &memPodLedger{}, "owner-job"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := f.job(t, "k8s_get_pod_status", podParams(), "")
			if tc.job != nil {
				tc.job(j)
			}
			j = asServer(t, j)
			f.c.Cluster = &fakeCluster{jobs: []*batchv1.Job{j}}
			f.c.Pods = admittedJobs(t, j)
			if tc.ledger != nil {
				f.c.Pods = tc.ledger
			}
			req := Request{Operation: "CREATE", User: DefaultJobControllerUsers[0], Namespace: j.Namespace}
			if _, err := f.c.CheckPod(context.Background(), req, obj(t, podOf(t, j)), nil); ruleOf(err) != tc.rule {
				t.Fatalf("rule %q (%v), want %q", ruleOf(err), err, tc.rule)
			}
		})
	}
}

// TestCheckPodWithoutLedgerIsRefused: without a Pod ledger the webhook cannot tell a second Pod from the
// first, so it admits none (a dry run records nothing and needs none).
func TestCheckPodWithoutLedgerIsRefused(t *testing.T) {
	f := newFixture(t)
	j := asServer(t, f.job(t, "k8s_get_pod_status", podParams(), ""))
	f.c.Cluster = &fakeCluster{jobs: []*batchv1.Job{j}}
	f.c.Pods = nil
	req := Request{Operation: "CREATE", User: DefaultJobControllerUsers[0], Namespace: j.Namespace}
	if _, err := f.c.CheckPod(context.Background(), req, obj(t, podOf(t, j)), nil); ruleOf(err) != "one-pod-per-job" {
		t.Fatalf("no ledger: %v", err)
	}
	req.DryRun = true
	if _, err := f.c.CheckPod(context.Background(), req, obj(t, podOf(t, j)), nil); err != nil {
		t.Fatalf("dry run without a ledger: %v", err)
	}
}

// TestCheckPodEvaluatesTheRules: the policy's CEL rules hold for Pods too, also for the exact Pod of an
// admitted Job (a rule the policy adds after the Job was admitted, say).
func TestCheckPodEvaluatesTheRules(t *testing.T) {
	f := newFixture(t)
	j := asServer(t, f.job(t, "k8s_get_pod_status", podParams(), ""))
	f.c.Cluster = &fakeCluster{jobs: []*batchv1.Job{j}}
	f.c.Pods = admittedJobs(t, j)
	f.c.SetPolicy(policyWithRule(t, "deny-renderings", denyRenderings))
	req := Request{Operation: "CREATE", User: DefaultJobControllerUsers[0], Namespace: j.Namespace}
	if _, err := f.c.CheckPod(context.Background(), req, obj(t, podOf(t, j)), nil); ruleOf(err) != "deny-renderings" {
		t.Fatalf("rule %q (%v), want deny-renderings", ruleOf(err), err)
	}
}

// TestUpdateWithoutOldObjectIsRefused: an UPDATE is checked against the object as admitted; without it,
// nothing can be compared, so nothing is admitted.
func TestUpdateWithoutOldObjectIsRefused(t *testing.T) {
	f := newFixture(t)
	j := asServer(t, f.job(t, "k8s_get_pod_status", podParams(), ""))
	upd := Request{Operation: "UPDATE", User: "someone", Namespace: j.Namespace}
	if _, err := f.c.CheckJob(context.Background(), upd, obj(t, j), nil); ruleOf(err) != "immutable" {
		t.Errorf("Job: %v", err)
	}
	if _, err := f.c.CheckPod(context.Background(), upd, obj(t, podOf(t, j)), nil); ruleOf(err) != "immutable" {
		t.Errorf("Pod: %v", err)
	}
}
