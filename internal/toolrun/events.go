package toolrun

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
)

// MaxEvents is the most events `run events` returns.
const MaxEvents = 200

// EventsOptions are the inputs of ListEvents.
type EventsOptions struct {
	Namespace string
	// Kind and Name narrow the events to one object (or, with only Kind, to objects of one kind).
	Kind, Name string
	// Type, when set, is Normal or Warning.
	Type string
	// Limit is how many of the newest events to return (1..MaxEvents).
	Limit int
	Now   func() time.Time
}

// EventsResult is what `run events` writes.
type EventsResult struct {
	Namespace string `json:"namespace"`
	Kind      string `json:"kind,omitempty"`
	Name      string `json:"name,omitempty"`
	Type      string `json:"type,omitempty"`
	// Events are the newest first.
	Events []Event `json:"events"`
	// Total is how many events matched; Truncated is true when more matched than were returned.
	Total     int  `json:"total"`
	Truncated bool `json:"truncated"`
}

// Event is one Kubernetes event.
type Event struct {
	// Type is Normal or Warning.
	Type    string `json:"type"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
	// Object is the event's subject, "Kind/name".
	Object string `json:"object"`
	// Count is how often it happened.
	Count     int32  `json:"count"`
	FirstSeen string `json:"first_seen"`
	LastSeen  string `json:"last_seen"`
	Age
	// Source is the component that reported it.
	Source string `json:"source,omitempty"`
}

// Validate checks the options before anything is read.
func (o *EventsOptions) Validate() error {
	var errs []string
	if err := validateName("--namespace", o.Namespace, true); err != nil {
		errs = append(errs, err.Error())
	}
	if o.Kind != "" && (len(o.Kind) > 63 || strings.Trim(o.Kind, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") != "") {
		errs = append(errs, fmt.Sprintf("--kind %q: not a kind", o.Kind))
	}
	if o.Name != "" {
		if err := validateName("--name", o.Name, false); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if o.Type != "" && o.Type != corev1.EventTypeNormal && o.Type != corev1.EventTypeWarning {
		errs = append(errs, fmt.Sprintf("--type %q: Normal or Warning", o.Type))
	}
	if o.Limit < 1 || o.Limit > MaxEvents {
		errs = append(errs, fmt.Sprintf("--limit %d: must be between 1 and %d", o.Limit, MaxEvents))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// ListEvents lists the events of a namespace, or of one object in it (needs list on events), newest first.
func ListEvents(ctx context.Context, client kubernetes.Interface, o EventsOptions) (EventsResult, error) {
	if err := o.Validate(); err != nil {
		return EventsResult{}, err
	}
	sel := fields.Set{}
	if o.Kind != "" {
		sel["involvedObject.kind"] = o.Kind
	}
	if o.Name != "" {
		sel["involvedObject.name"] = o.Name
	}
	if o.Type != "" {
		sel["type"] = o.Type
	}
	list, err := client.CoreV1().Events(o.Namespace).List(ctx, metav1.ListOptions{FieldSelector: sel.AsSelector().String()})
	if err != nil {
		return EventsResult{}, fmt.Errorf("list events in %s: %w", o.Namespace, err)
	}
	now := nowOr(o.Now)
	res := EventsResult{Namespace: o.Namespace, Kind: o.Kind, Name: o.Name, Type: o.Type, Events: []Event{}}
	var matched []*corev1.Event
	for i := range list.Items {
		e := &list.Items[i]
		// The API server applies the field selector; checking again costs nothing and keeps the result true
		// to the request whatever answered it.
		if (o.Kind != "" && e.InvolvedObject.Kind != o.Kind) || (o.Name != "" && e.InvolvedObject.Name != o.Name) || (o.Type != "" && e.Type != o.Type) {
			continue
		}
		matched = append(matched, e)
	}
	slices.SortStableFunc(matched, func(a, b *corev1.Event) int { return lastSeen(b).Compare(lastSeen(a)) })
	res.Total = len(matched)
	if len(matched) > o.Limit {
		matched, res.Truncated = matched[:o.Limit], true
	}
	for _, e := range matched {
		typ := e.Type
		if typ != corev1.EventTypeNormal {
			// Kubernetes knows only Normal and Warning; anything else deserves attention too.
			typ = corev1.EventTypeWarning
		}
		msg, _ := cutUTF8(e.Message, maxMessageBytes)
		first := e.FirstTimestamp
		if first.IsZero() {
			first = e.CreationTimestamp
		}
		source := e.Source.Component
		if source == "" {
			source = e.ReportingController
		}
		count := e.Count
		if count == 0 {
			count = 1
		}
		if e.Series != nil && e.Series.Count > count {
			count = e.Series.Count
		}
		res.Events = append(res.Events, Event{
			Type: typ, Reason: e.Reason, Message: msg, Object: e.InvolvedObject.Kind + "/" + e.InvolvedObject.Name, Count: count,
			FirstSeen: timestamp(first), LastSeen: lastSeen(e).UTC().Format(time.RFC3339), Age: ageOf(lastSeen(e), now), Source: source,
		})
	}
	return res, nil
}

// lastSeen is when an event last happened, from whichever of its timestamps is set.
func lastSeen(e *corev1.Event) time.Time {
	switch {
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return e.Series.LastObservedTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.FirstTimestamp.IsZero():
		return e.FirstTimestamp.Time
	}
	return e.CreationTimestamp.Time
}
