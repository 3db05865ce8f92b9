// Package telemetrytest records the spans of a telemetry.Tracer in memory, as plain values, for tests of
// the packages that trace calls (they need not import the OpenTelemetry SDK).
package telemetrytest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agent-sandbox/agent-sandbox/internal/telemetry"
)

// Span is one ended span.
type Span struct {
	Name      string
	TraceID   string
	SpanID    string
	ParentID  string // "" for a root span
	Start     time.Time
	End       time.Time
	Attrs     map[string]string
	Events    []Event
	Error     bool
	ErrorText string
}

// Event is one span event.
type Event struct {
	Name  string
	Time  time.Time
	Attrs map[string]string
}

// Recorder holds the spans a tracer ended.
type Recorder struct {
	exp *tracetest.InMemoryExporter
}

// New returns a tracer that records into the returned Recorder; it is shut down when the test ends.
func New(t testing.TB) (*telemetry.Tracer, *Recorder) {
	exp := tracetest.NewInMemoryExporter()
	tr, shutdown := telemetry.NewWithExporter(exp)
	t.Cleanup(func() { _ = shutdown(context.Background()) })
	return tr, &Recorder{exp: exp}
}

// Spans returns the ended spans in the order they ended.
func (r *Recorder) Spans() []Span {
	var out []Span
	for _, s := range r.exp.GetSpans() {
		sp := Span{Name: s.Name, TraceID: s.SpanContext.TraceID().String(), SpanID: s.SpanContext.SpanID().String(),
			Start: s.StartTime, End: s.EndTime, Attrs: map[string]string{},
			Error: s.Status.Code == codes.Error, ErrorText: s.Status.Description}
		if s.Parent.IsValid() {
			sp.ParentID = s.Parent.SpanID().String()
		}
		for _, a := range s.Attributes {
			sp.Attrs[string(a.Key)] = a.Value.Emit()
		}
		for _, e := range s.Events {
			ev := Event{Name: e.Name, Time: e.Time, Attrs: map[string]string{}}
			for _, a := range e.Attributes {
				ev.Attrs[string(a.Key)] = a.Value.Emit()
			}
			sp.Events = append(sp.Events, ev)
		}
		out = append(out, sp)
	}
	return out
}

// String is every recorded name, attribute, event and status text, for assertions that a value appears
// nowhere.
func (r *Recorder) String() string {
	return fmt.Sprint(r.Spans())
}
