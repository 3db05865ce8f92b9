package toolrun

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/validation"
)

// This file holds what the read tools share: name checks, ages and conditions.

// validateName checks a namespace or container name (a DNS label) or an object name (a DNS subdomain).
func validateName(flag, v string, label bool) error {
	var problems []string
	if label {
		problems = validation.IsDNS1123Label(v)
	} else {
		problems = validation.IsDNS1123Subdomain(v)
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s %q: not a valid name", flag, v)
	}
	return nil
}

// Age is how long ago something happened, in kubectl's form and in seconds.
type Age struct {
	Age        string `json:"age"`
	AgeSeconds int64  `json:"age_seconds"`
}

func ageOf(t time.Time, now time.Time) Age {
	if t.IsZero() {
		return Age{Age: "<unknown>"}
	}
	d := now.Sub(t)
	if d < 0 {
		d = 0
	}
	return Age{Age: duration.HumanDuration(d), AgeSeconds: int64(d / time.Second)}
}

// timestamp formats a time for a result (RFC 3339, UTC), "" when unset.
func timestamp(t metav1.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// Condition is one status condition of an object.
type Condition struct {
	Type string `json:"type"`
	// Status is True, False or Unknown.
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// maxMessageBytes bounds a message (an event's, a condition's) in a result.
const maxMessageBytes = 1024

func condition(typ, status, reason, message string) Condition {
	switch status {
	case "True", "False":
	default:
		status = "Unknown"
	}
	m, _ := cutUTF8(message, maxMessageBytes)
	return Condition{Type: typ, Status: status, Reason: reason, Message: m}
}

func nowOr(now func() time.Time) time.Time {
	if now == nil {
		return time.Now()
	}
	return now()
}
