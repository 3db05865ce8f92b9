package webhook

import (
	"context"
	"errors"
	"fmt"
	"sort"
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
// Only one replica runs it at a time (see RunPoolLeader).
type Pool struct {
	Client client.Client
	// Policy returns the policy in force (nil before the first load).
	Policy  func() *policy.Compiled
	Log     logr.Logger
	Metrics *Metrics
	// NewSuffix makes warm Job names (sandbox.NewWarmSuffix when nil).
	NewSuffix func() (string, error)
}

// PoolState counts one tool's warm Jobs after a reconcile.
type PoolState struct {
	// Idle Pods are running and unclaimed; Starting ones are not running yet; Claimed ones serve a call.
	Idle, Starting, Claimed int
	// Created and Deleted are this pass's actions.
	Created, Deleted int
}

// Reconcile brings every pool to its size once and returns each warm tool's state. Errors of single
// objects are joined; the rest of the pass goes on.
func (p *Pool) Reconcile(ctx context.Context) (map[string]*PoolState, error) {
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
	podOf := map[string]*corev1.Pod{}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if pod.DeletionTimestamp == nil {
			podOf[pod.Labels[batchv1.JobNameLabel]] = pod
		}
	}

	states := map[string]*PoolState{}
	for i := range pol.Spec.Tools {
		if t := &pol.Spec.Tools[i]; t.WarmPool != nil {
			states[t.Name] = &PoolState{}
		}
	}
	var errs []error
	for i := range jobs.Items {
		job := &jobs.Items[i]
		if job.DeletionTimestamp != nil {
			continue
		}
		pod := podOf[job.Name]
		claimed := pod != nil && pod.Annotations[contract.AnnotationClaim] != ""
		st, why := states[job.Labels[contract.LabelTool]], ""
		switch {
		case st == nil:
			why = "its tool has no warm pool in the policy"
		case finished(job):
			why = "it finished"
		case pod != nil && (pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed):
			why = "its Pod finished"
		case !claimed && !current(pol, job):
			why = "the policy in force renders it differently"
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
	return states, errors.Join(errs...)
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

// Run reconciles every interval until ctx ends.
func (p *Pool) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if _, err := p.Reconcile(ctx); err != nil && ctx.Err() == nil {
			p.Log.Error(err, "warm pool")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// finished reports whether a Job has ended (or is ending).
func finished(job *batchv1.Job) bool {
	return runnable(job) != nil
}

// current reports whether a warm Job is what the policy in force renders for its tool (the webhook's
// injection and the API server's defaults included).
func current(pol *policy.Compiled, job *batchv1.Job) bool {
	t, err := warmTool(pol, job.Labels)
	if err != nil {
		return false
	}
	want, err := expectedWarmJob(pol, t, job.Name)
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
