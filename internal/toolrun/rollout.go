package toolrun

import (
	"context"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The states a rollout can be in, as `run rollout-status` reports them.
const (
	RolloutComplete    = "complete"
	RolloutProgressing = "progressing"
	RolloutFailed      = "failed"
	RolloutPaused      = "paused"
	// RolloutUnknown is a StatefulSet whose update strategy (OnDelete) has no rollout to follow.
	RolloutUnknown = "unknown"
)

// RolloutStatuses lists every rollout state.
var RolloutStatuses = []string{RolloutComplete, RolloutProgressing, RolloutFailed, RolloutPaused, RolloutUnknown}

// RolloutOptions are the inputs of RolloutStatus.
type RolloutOptions struct {
	Namespace string
	// Kind is deployment or statefulset.
	Kind string
	Name string
}

// RolloutResult is what `run rollout-status` writes: where the rollout of one Deployment or StatefulSet
// stands now (it does not wait; call again to follow it).
type RolloutResult struct {
	Namespace string `json:"namespace"`
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	// Status is complete, progressing, failed, paused or unknown.
	Status string `json:"status"`
	// Message says why, the way `kubectl rollout status` does.
	Message            string      `json:"message"`
	Generation         int64       `json:"generation"`
	ObservedGeneration int64       `json:"observed_generation"`
	Replicas           int32       `json:"replicas"`
	UpdatedReplicas    int32       `json:"updated_replicas"`
	ReadyReplicas      int32       `json:"ready_replicas"`
	AvailableReplicas  int32       `json:"available_replicas"`
	Conditions         []Condition `json:"conditions"`
}

// Validate checks the options before anything is read.
func (o *RolloutOptions) Validate() error {
	var errs []string
	if err := validateName("--namespace", o.Namespace, true); err != nil {
		errs = append(errs, err.Error())
	}
	if o.Kind != KindDeployment && o.Kind != KindStatefulSet {
		errs = append(errs, fmt.Sprintf("--kind %q: deployment or statefulset", o.Kind))
	}
	if err := validateName("--name", o.Name, false); err != nil {
		errs = append(errs, err.Error())
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// RolloutStatus reads a Deployment or StatefulSet (needs get on it) and says where its rollout stands.
func RolloutStatus(ctx context.Context, client kubernetes.Interface, o RolloutOptions) (RolloutResult, error) {
	if err := o.Validate(); err != nil {
		return RolloutResult{}, err
	}
	res := RolloutResult{Namespace: o.Namespace, Kind: o.Kind, Name: o.Name, Conditions: []Condition{}}
	switch o.Kind {
	case KindDeployment:
		d, err := client.AppsV1().Deployments(o.Namespace).Get(ctx, o.Name, metav1.GetOptions{})
		if err != nil {
			return RolloutResult{}, fmt.Errorf("get deployment %s/%s: %w", o.Namespace, o.Name, err)
		}
		deploymentRollout(d, &res)
	case KindStatefulSet:
		s, err := client.AppsV1().StatefulSets(o.Namespace).Get(ctx, o.Name, metav1.GetOptions{})
		if err != nil {
			return RolloutResult{}, fmt.Errorf("get statefulset %s/%s: %w", o.Namespace, o.Name, err)
		}
		statefulSetRollout(s, &res)
	}
	return res, nil
}

// deploymentRollout judges a Deployment's rollout from its status, in the order that decides it: a spec
// change the controller has not seen yet, a rollout past its progress deadline, a paused one, then the
// replica counts.
func deploymentRollout(d *appsv1.Deployment, r *RolloutResult) {
	want := replicas(d.Spec.Replicas)
	st := d.Status
	r.Generation, r.ObservedGeneration = d.Generation, st.ObservedGeneration
	r.Replicas, r.UpdatedReplicas, r.ReadyReplicas, r.AvailableReplicas = want, st.UpdatedReplicas, st.ReadyReplicas, st.AvailableReplicas
	var progressing *appsv1.DeploymentCondition
	for i, c := range st.Conditions {
		r.Conditions = append(r.Conditions, condition(string(c.Type), string(c.Status), c.Reason, c.Message))
		if c.Type == appsv1.DeploymentProgressing {
			progressing = &st.Conditions[i]
		}
	}
	switch {
	case d.Generation > st.ObservedGeneration:
		r.Status, r.Message = RolloutProgressing, "waiting for the deployment's new spec to be observed"
	case progressing != nil && progressing.Reason == "ProgressDeadlineExceeded":
		r.Status, r.Message = RolloutFailed, fmt.Sprintf("deployment %q exceeded its progress deadline", d.Name)
	case d.Spec.Paused:
		r.Status, r.Message = RolloutPaused, fmt.Sprintf("deployment %q is paused", d.Name)
	case st.UpdatedReplicas < want:
		r.Status, r.Message = RolloutProgressing, fmt.Sprintf("%d of %d new replicas have been updated", st.UpdatedReplicas, want)
	case st.Replicas > st.UpdatedReplicas:
		r.Status, r.Message = RolloutProgressing, fmt.Sprintf("%d old replicas are pending termination", st.Replicas-st.UpdatedReplicas)
	case st.AvailableReplicas < st.UpdatedReplicas:
		r.Status, r.Message = RolloutProgressing, fmt.Sprintf("%d of %d updated replicas are available", st.AvailableReplicas, st.UpdatedReplicas)
	default:
		r.Status, r.Message = RolloutComplete, fmt.Sprintf("deployment %q successfully rolled out", d.Name)
	}
}

// statefulSetRollout judges a StatefulSet's rollout: only the RollingUpdate strategy has one; with a
// partition only the ordinals at or above it are updated.
func statefulSetRollout(s *appsv1.StatefulSet, r *RolloutResult) {
	want := replicas(s.Spec.Replicas)
	st := s.Status
	r.Generation, r.ObservedGeneration = s.Generation, st.ObservedGeneration
	r.Replicas, r.UpdatedReplicas, r.ReadyReplicas, r.AvailableReplicas = want, st.UpdatedReplicas, st.ReadyReplicas, st.AvailableReplicas
	for _, c := range s.Status.Conditions {
		r.Conditions = append(r.Conditions, condition(string(c.Type), string(c.Status), c.Reason, c.Message))
	}
	if s.Spec.UpdateStrategy.Type != "" && s.Spec.UpdateStrategy.Type != appsv1.RollingUpdateStatefulSetStrategyType {
		r.Status, r.Message = RolloutUnknown, fmt.Sprintf("statefulset %q uses the %s update strategy, which has no rollout to follow", s.Name, s.Spec.UpdateStrategy.Type)
		return
	}
	var partition int32
	if ru := s.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.Partition != nil {
		partition = *ru.Partition
	}
	switch {
	case st.ObservedGeneration == 0 || s.Generation > st.ObservedGeneration:
		r.Status, r.Message = RolloutProgressing, "waiting for the statefulset's new spec to be observed"
	case st.ReadyReplicas < want:
		r.Status, r.Message = RolloutProgressing, fmt.Sprintf("%d of %d pods are ready", st.ReadyReplicas, want)
	case partition > 0 && st.UpdatedReplicas < want-partition:
		r.Status, r.Message = RolloutProgressing, fmt.Sprintf("%d of %d pods above partition %d have been updated", st.UpdatedReplicas, want-partition, partition)
	case partition == 0 && st.UpdateRevision != st.CurrentRevision:
		r.Status, r.Message = RolloutProgressing, fmt.Sprintf("%d of %d pods have been updated to revision %s", st.UpdatedReplicas, want, st.UpdateRevision)
	case partition > 0:
		r.Status, r.Message = RolloutComplete, fmt.Sprintf("partitioned rollout complete: %d new pods have been updated", st.UpdatedReplicas)
	default:
		r.Status, r.Message = RolloutComplete, fmt.Sprintf("statefulset rolling update complete: %d pods at revision %s", st.CurrentReplicas, st.CurrentRevision)
	}
}
