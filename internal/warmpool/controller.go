// Package warmpool runs the warm pools (docs/design/warm-pool.md) as a controller-runtime controller: a
// watch of the sandbox namespace's warm Jobs and warm Pods feeds one reconcile of every pool, so that a
// warm Pod deleted, evicted or claimed, or a warm Job gone, is acted on within a moment, and a resync after
// --warm-pool-interval catches what no event signals (a Job left without a Pod past its grace, a reloaded
// policy, a claim anchored but never stored). What a pass does — which warm Jobs are stale, how many to
// create, which claims' audit anchors to void — is webhook.Pool.Sync, beside the admission decisions it
// must agree with; this package only decides when to run it.
//
// Trust role: in the cluster, trusted. It runs inside the webhook process, on the one replica that holds
// the pool's Lease; the admission endpoints do not depend on it and keep serving on every replica.
package warmpool

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/agent-sandbox/agent-sandbox/internal/contract"
	"github.com/agent-sandbox/agent-sandbox/webhook"
)

// ControllerName names the controller in logs and in controller-runtime's metrics.
const ControllerName = "warm-pool"

// poolRequest is the one request every event maps to: the pools are sized together in one pass (one list
// of the namespace's warm Jobs and Pods), so there is nothing to gain from a request per object, and the
// work queue folds a burst of events into one pass.
var poolRequest = reconcile.Request{NamespacedName: types.NamespacedName{Name: "pools"}}

// Reconciler runs one pass of Pool for every request and asks for the next after Interval.
type Reconciler struct {
	Pool     *webhook.Pool
	Interval time.Duration
	Log      logr.Logger
}

// Reconcile implements reconcile.Reconciler. A pass that fails on some objects is logged and retried at
// the next event or after Interval, like the pass as a whole: the pool never backs off longer than that.
func (r *Reconciler) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	if _, err := r.Pool.Sync(ctx); err != nil && ctx.Err() == nil {
		r.Log.Error(err, "warm pool")
	}
	return reconcile.Result{RequeueAfter: r.Interval}, nil
}

// Run runs the controller for the sandbox namespace ns until ctx ends, in a controller-runtime manager of
// its own: a cache of ns's warm Jobs and warm Pods only (the label contract.LabelWarm), no webhook server,
// no listener. The pass reads through pool.Client, uncached, so that it never counts from a cache that has
// not seen its own last create yet; the cache's events only say when to run. The webhook calls Run while it
// holds the pool's Lease, and again for each new term.
func Run(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, r *Reconciler, ns string) error {
	warm, err := labels.NewRequirement(contract.LabelWarm, selection.Exists, nil)
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Logger:                 r.Log,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache: cache.Options{
			DefaultNamespaces:    map[string]cache.Config{ns: {}},
			DefaultLabelSelector: labels.NewSelector().Add(*warm),
		},
	})
	if err != nil {
		return fmt.Errorf("warm pool manager: %w", err)
	}
	if err := setup(mgr, r); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// setup registers the controller: every event of a warm Job or warm Pod, and one request at start (so
// that an empty namespace, which has no events, is filled too), enqueue poolRequest.
func setup(mgr ctrl.Manager, r *Reconciler) error {
	toPool := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{poolRequest}
	})
	start := source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		q.Add(poolRequest)
		return nil
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: 1,
			// Each term of the Lease starts a new manager in the same process, with a controller of the same
			// name; controller-runtime's metrics are labelled by it, so one name across terms is what we want.
			SkipNameValidation: ptr.To(true),
		}).
		Watches(&batchv1.Job{}, toPool).
		Watches(&corev1.Pod{}, toPool).
		WatchesRawSource(start).
		Complete(r)
}
