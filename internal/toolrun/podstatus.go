package toolrun

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/client-go/kubernetes"
)

// MaxPods is the most pods `run pod-status` reports.
const MaxPods = 500

// PodStatusOptions are the inputs of ListPodStatus.
type PodStatusOptions struct {
	Namespace string
	// Selector is a label selector in the usual syntax ("app=web,track!=canary"); "" lists every pod.
	Selector string
	// Now is the clock ages are computed against (time.Now when nil).
	Now func() time.Time
}

// ParseSelector validates a label selector; the empty selector selects everything.
func ParseSelector(s string) (labels.Selector, error) {
	sel, err := labels.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("label selector %q: %w", s, err)
	}
	return sel, nil
}

// ListPodStatus lists the pods of a namespace (needs only list on pods) and summarises each.
func ListPodStatus(ctx context.Context, client kubernetes.Interface, o PodStatusOptions) (PodStatusResult, error) {
	sel, err := ParseSelector(o.Selector)
	if err != nil {
		return PodStatusResult{}, err
	}
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	list, err := client.CoreV1().Pods(o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return PodStatusResult{}, fmt.Errorf("list pods in %s: %w", o.Namespace, err)
	}
	res := PodStatusResult{Namespace: o.Namespace, Selector: o.Selector, Pods: make([]PodStatus, 0, len(list.Items))}
	t := now()
	for i := range list.Items {
		res.Pods = append(res.Pods, summarizePod(&list.Items[i], t))
	}
	sort.Slice(res.Pods, func(i, j int) bool { return res.Pods[i].Name < res.Pods[j].Name })
	res.Total = len(res.Pods)
	if len(res.Pods) > MaxPods {
		res.Pods, res.Truncated = res.Pods[:MaxPods], true
	}
	return res, nil
}

// summarizePod computes one row the way kubectl does for its default columns.
func summarizePod(p *corev1.Pod, now time.Time) PodStatus {
	ready := 0
	var restarts int32
	reason := p.Status.Reason
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Ready {
			ready++
		}
		restarts += cs.RestartCount
		switch {
		case cs.State.Waiting != nil && cs.State.Waiting.Reason != "" && cs.State.Waiting.Reason != "ContainerCreating":
			reason = cs.State.Waiting.Reason
		case cs.State.Terminated != nil && cs.State.Terminated.Reason != "" && cs.State.Terminated.Reason != "Completed":
			if reason == "" {
				reason = cs.State.Terminated.Reason
			}
		}
	}
	if p.DeletionTimestamp != nil {
		reason = "Terminating"
	}
	var age time.Duration
	if !p.CreationTimestamp.IsZero() {
		age = now.Sub(p.CreationTimestamp.Time)
		if age < 0 {
			age = 0
		}
	}
	return PodStatus{
		Name:       p.Name,
		Phase:      string(p.Status.Phase),
		Reason:     reason,
		Ready:      fmt.Sprintf("%d/%d", ready, len(p.Spec.Containers)),
		Restarts:   restarts,
		Age:        duration.HumanDuration(age),
		AgeSeconds: int64(age / time.Second),
		Node:       p.Spec.NodeName,
	}
}
