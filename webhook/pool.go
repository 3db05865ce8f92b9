package webhook

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/go-logr/logr"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
)

// Pool keeps the warm pools the policy declares (docs/design/warm-pool.md): for every tool with a warmPool
// it keeps Min unclaimed warm Pods, at most Max warm Jobs in all, and deletes warm Jobs that finished, that
// belong to no pool, or that the policy in force no longer renders (unless claimed: a call is running).
// It creates warm Jobs through the API server like anyone else, so admission checks them by the same rules.
// Sync is one pass; internal/warmpool runs it as a controller on the one replica that holds the pool's
// Lease. Each pass also settles the audit anchors of claims that were admitted but never stored (settle.go).
type Pool struct {
	Client client.Client
	// Policy returns the policy in force (nil before the first load).
	Policy  func() *policy.Compiled
	Log     logr.Logger
	Metrics *Metrics
	// NewSuffix makes warm Job names (sandbox.NewWarmSuffix when nil).
	NewSuffix func() (string, error)
	// ClaimKeys is the webhook's --claim-keys value (Checker.claimKeys): part of the warm rendering, so a
	// warm Job injected with other keys is stale.
	ClaimKeys string
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Anchors, when set, lets the pool settle the audit anchors of claims that were admitted but never
	// stored (settle.go): it reads them and records their void marks.
	Anchors VoidLedger

	settleMu    sync.Mutex
	settledPods string    // the warm Pods (UIDs and resourceVersions) when the claims were last settled
	settledAt   time.Time // and when
}

// podlessGrace is how long a warm Job may exist without ever having had a Pod before the pool takes it for
// stuck (its Pod was refused, say) and replaces it. The Job controller creates the Pod within a second.
const podlessGrace = 30 * time.Second

// PoolState counts one tool's warm Jobs after a reconcile.
type PoolState struct {
	// Idle Pods are running and unclaimed; Starting ones are not running yet; Claimed ones serve a call.
	Idle, Starting, Claimed int
	// Created and Deleted are this pass's actions.
	Created, Deleted int
}

// Sync brings every pool to its size once and returns each warm tool's state. Errors of single objects
// are joined; the rest of the pass goes on.
func (p *Pool) Sync(ctx context.Context) (map[string]*PoolState, error) {
	pol := p.Policy()
	if pol == nil {
		return nil, nil
	}
	ns := pol.Spec.Sandbox.Namespace
	var jobs batchv1.JobList
	if err := p.Client.List(ctx, &jobs, client.InNamespace(ns), client.HasLabels{contract.LabelWarm}); err != nil {
		return nil, fmt.Errorf("list warm Jobs of %s: %w", ns, err)
	}
	var pods corev1.PodList
	if err := p.Client.List(ctx, &pods, client.InNamespace(ns), client.HasLabels{contract.LabelWarm}); err != nil {
		return nil, fmt.Errorf("list warm Pods of %s: %w", ns, err)
	}
	// A warm Job's live Pod, and whether it has one going away (deleted or evicted).
	podOf, leaving := podsByJob(pods.Items)
	now := time.Now()
	if p.Now != nil {
		now = p.Now()
	}

	states := map[string]*PoolState{}
	for i := range pol.Spec.Tools {
		if t := &pol.Spec.Tools[i]; t.WarmPool != nil {
			states[t.Name] = &PoolState{}
		}
	}
	// First the claims anchored on these Pods, while the Pods are still there to tell their fate.
	errs := p.settleClaims(ctx, ns, pods.Items, now)
	errs = append(errs, p.sweep(ctx, pol, jobs.Items, podOf, leaving, now, states)...)
	errs = append(errs, p.fill(ctx, pol, states)...)
	return states, errors.Join(errs...)
}

// podsByJob maps each warm Job's name to its live Pod, and to its Pod being deleted or evicted.
func podsByJob(pods []corev1.Pod) (podOf, leaving map[string]*corev1.Pod) {
	podOf, leaving = map[string]*corev1.Pod{}, map[string]*corev1.Pod{}
	for i := range pods {
		pod := &pods[i]
		if pod.DeletionTimestamp == nil {
			podOf[pod.Labels[batchv1.JobNameLabel]] = pod
		} else {
			leaving[pod.Labels[batchv1.JobNameLabel]] = pod
		}
	}
	return podOf, leaving
}

// sweep deletes the warm Jobs that can serve no call any more (their tool lost its pool, they or their Pod
// finished, the policy renders them differently, their Pod is gone) and counts the others in states.
func (p *Pool) sweep(ctx context.Context, pol *policy.Compiled, jobs []batchv1.Job, podOf, leaving map[string]*corev1.Pod, now time.Time, states map[string]*PoolState) []error {
	var errs []error
	for i := range jobs {
		job := &jobs[i]
		if job.DeletionTimestamp != nil {
			continue
		}
		pod := podOf[job.Name]
		claimed := (pod != nil && IsClaimedPod(pod)) || (pod == nil && leaving[job.Name] != nil && IsClaimedPod(leaving[job.Name]))
		st, why := states[job.Labels[contract.LabelTool]], ""
		switch {
		case st == nil:
			why = "its tool has no warm pool in the policy"
		case finished(job):
			why = "it finished"
		case pod != nil && (pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed):
			why = "its Pod finished"
		case !claimed && !current(pol, job, p.ClaimKeys):
			why = "the policy in force renders it differently"
		case pod == nil:
			why = podGone(job, leaving[job.Name], now)
		}
		if why != "" {
			if err := p.delete(ctx, job); err != nil {
				errs = append(errs, err)
			} else {
				p.Log.V(1).Info("deleted warm Job", "job", job.Name, "reason", why)
				if st != nil {
					st.Deleted++
				}
			}
			continue
		}
		switch {
		case claimed:
			st.Claimed++
		case pod != nil && sandbox.Claimable(pod):
			st.Idle++
		default:
			st.Starting++
		}
	}

	return errs
}

// fill creates warm Jobs until each pool has its minimum of idle and starting Pods, within its maximum
// counting the claimed ones, in the order of the tools' names, and publishes each pool's counts.
func (p *Pool) fill(ctx context.Context, pol *policy.Compiled, states map[string]*PoolState) []error {
	var errs []error
	tools := make([]string, 0, len(states))
	for name := range states {
		tools = append(tools, name)
	}
	sort.Strings(tools)
	for _, name := range tools {
		st := states[name]
		t, err := pol.Tool(name)
		if err != nil {
			continue
		}
		for st.Idle+st.Starting < t.WarmPool.Min && st.Idle+st.Starting+st.Claimed < t.WarmPool.Max {
			if err := p.create(ctx, pol, t); err != nil {
				errs = append(errs, err)
				break
			}
			st.Starting++
			st.Created++
		}
		if p.Metrics != nil {
			p.Metrics.warm.WithLabelValues(name, "idle").Set(float64(st.Idle))
			p.Metrics.warm.WithLabelValues(name, "starting").Set(float64(st.Starting))
			p.Metrics.warm.WithLabelValues(name, "claimed").Set(float64(st.Claimed))
		}
	}
	return errs
}

// create submits one warm Job of t.
func (p *Pool) create(ctx context.Context, pol *policy.Compiled, t *policy.Tool) error {
	newSuffix := p.NewSuffix
	if newSuffix == nil {
		newSuffix = sandbox.NewWarmSuffix
	}
	suffix, err := newSuffix()
	if err != nil {
		return err
	}
	job, err := sandbox.RenderWarmJob(pol, t, suffix)
	if err != nil {
		return err
	}
	if err := p.Client.Create(ctx, job); err != nil {
		return fmt.Errorf("create warm Job of %s: %w", t.Name, err)
	}
	p.Log.V(1).Info("created warm Job", "job", job.Name, "tool", t.Name)
	return nil
}

func (p *Pool) delete(ctx context.Context, job *batchv1.Job) error {
	err := p.Client.Delete(ctx, job, client.PropagationPolicy("Background"), client.Preconditions{UID: ptr.To(job.UID)})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete warm Job %s: %w", job.Name, err)
	}
	return nil
}

// podGone says why a warm Job without a live Pod is to be replaced, or "" while its Pod may still come.
// One admitted Job makes one Pod, once (the Pod ledger): a warm Job whose Pod was deleted, evicted or
// refused never gets another, and would count as starting until its deadline while every call goes cold.
// A Pod going away with a claim is a call's: the call's server deletes its Job.
func podGone(job *batchv1.Job, leaving *corev1.Pod, now time.Time) string {
	switch {
	case leaving != nil && !IsClaimedPod(leaving):
		return "its Pod is being deleted or evicted"
	case leaving != nil:
		return ""
	case hadPod(job):
		return "its Pod is gone, and a warm Job gets no second Pod"
	case !job.CreationTimestamp.IsZero() && now.Sub(job.CreationTimestamp.Time) > podlessGrace:
		return "it has had no Pod for " + podlessGrace.String()
	}
	return ""
}

// hadPod reports whether the Job controller has counted a Pod of job (running, or ended, or going away).
func hadPod(job *batchv1.Job) bool {
	s := job.Status
	return s.Active > 0 || s.Succeeded > 0 || s.Failed > 0 || (s.Terminating != nil && *s.Terminating > 0) ||
		(s.UncountedTerminatedPods != nil && len(s.UncountedTerminatedPods.Failed)+len(s.UncountedTerminatedPods.Succeeded) > 0)
}

// IsClaimedPod reports whether a warm Pod carries a claim: it serves (or served) a call. Eviction of such a
// Pod must be refused (a call is running on it); an unclaimed warm Pod may be evicted, and the pool
// replaces it.
func IsClaimedPod(pod *corev1.Pod) bool {
	_, warm := pod.Labels[contract.LabelWarm]
	return warm && pod.Annotations[contract.AnnotationClaim] != ""
}

// isClaimed is IsClaimedPod for an admission request's decoded object.
func isClaimed(o object) bool {
	return o != nil && isWarm(o.labels()) && o.annotations()[contract.AnnotationClaim] != ""
}

// finished reports whether a Job has ended (or is ending).
func finished(job *batchv1.Job) bool {
	return runnable(job) != nil
}

// current reports whether a warm Job is what the policy in force renders for its tool (the webhook's
// injection and the API server's defaults included).
func current(pol *policy.Compiled, job *batchv1.Job, claimKeys string) bool {
	t, err := warmTool(pol, job.Labels)
	if err != nil {
		return false
	}
	want, err := expectedWarmJob(pol, t, job.Name, claimKeys)
	if err != nil {
		return false
	}
	got, err := runtime.DefaultUnstructuredConverter.ToUnstructured(job)
	if err != nil {
		return false
	}
	got["apiVersion"], got["kind"] = "batch/v1", "Job"
	delete(got, "status")
	return exactJob(got, want) == nil
}
