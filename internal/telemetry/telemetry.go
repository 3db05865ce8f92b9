// Package telemetry traces tool calls with OpenTelemetry. It is the only package of this repository that
// imports the OpenTelemetry SDK and its exporters; the others use its small types (Tracer, Call, Event).
//
// A call's trace ID is derived from its request ID (TraceIDFor), so the request ID that names a call in
// the audit log, the approvals database and the sandbox Job's labels is also its trace's correlation: any
// component that knows only the request ID can put its spans into the same trace.
//
// Tracing is off unless an OTLP endpoint is configured. Off is a nil *Tracer, whose calls do nothing.
package telemetry

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/agent-sandbox/agent-sandbox/internal/scrub"
)

// ServiceName is the service.name of the MCP server's spans.
const ServiceName = "agent-sandbox-mcp"

// AttrRequestID is set on every span: the call's request ID.
const AttrRequestID = "agent_sandbox.request_id"

// The standard environment variables naming an OTLP endpoint, read when no endpoint is given.
const (
	EnvTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
)

// Options configure Setup.
type Options struct {
	// Endpoint is the OTLP/HTTP collector's base URL (http://host:4318) or, for a URL whose path is not
	// empty, the full traces URL. Empty: $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (a full URL), else
	// $OTEL_EXPORTER_OTLP_ENDPOINT (a base URL), else tracing is off.
	Endpoint string
	// Version is the service.version resource attribute.
	Version string
	// Getenv reads the environment; nil is os.Getenv.
	Getenv func(string) string
}

// ResolveEndpoint returns the traces URL that Setup exports to ("" when tracing is off) or an error that
// says what is wrong with the configured endpoint.
func (o Options) ResolveEndpoint() (string, error) {
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	raw, source, full := o.Endpoint, "--otlp-endpoint", false
	if raw == "" {
		if v := getenv(EnvTracesEndpoint); v != "" {
			raw, source, full = v, "$"+EnvTracesEndpoint, true
		} else if v := getenv(EnvEndpoint); v != "" {
			raw, source = v, "$"+EnvEndpoint
		}
	}
	if raw == "" {
		return "", nil
	}
	u, err := url.Parse(raw)
	if err == nil && u.User != nil {
		return "", fmt.Errorf("%s: the URL must not carry credentials (give the collector's address only)", source)
	}
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("%s %q: want an http:// or https:// URL of an OTLP/HTTP collector, such as http://127.0.0.1:4318", source, raw)
	}
	if !full && strings.Trim(u.Path, "/") == "" {
		u.Path = "/v1/traces"
	}
	return u.String(), nil
}

// Tracer starts the traces of tool calls. A nil *Tracer traces nothing, at no cost.
type Tracer struct {
	tracer trace.Tracer
}

// Setup returns the tracer that exports to the configured endpoint, and the function that flushes and
// stops it. With no endpoint configured the tracer is nil (off) and shutdown does nothing.
func Setup(ctx context.Context, o Options) (*Tracer, func(context.Context) error, error) {
	noop := func(context.Context) error { return nil }
	endpoint, err := o.ResolveEndpoint()
	if err != nil || endpoint == "" {
		return nil, noop, err
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint))
	if err != nil {
		return nil, noop, fmt.Errorf("otlp exporter: %w", err)
	}
	t, tp := newTracer(sdktrace.WithBatcher(exp), o.Version)
	return t, tp.Shutdown, nil
}

// NewWithExporter returns a tracer that hands every span to exp as soon as it ends (the telemetrytest
// package's in-memory recorder), and its shutdown.
func NewWithExporter(exp sdktrace.SpanExporter) (*Tracer, func(context.Context) error) {
	t, tp := newTracer(sdktrace.WithSyncer(exp), "")
	return t, tp.Shutdown
}

func newTracer(export sdktrace.TracerProviderOption, version string) (*Tracer, *sdktrace.TracerProvider) {
	attrs := []attribute.KeyValue{semconv.ServiceName(ServiceName)}
	if version != "" {
		attrs = append(attrs, semconv.ServiceVersion(version))
	}
	tp := sdktrace.NewTracerProvider(export,
		sdktrace.WithResource(resource.NewWithAttributes(semconv.SchemaURL, attrs...)),
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithIDGenerator(requestIDs{}))
	return &Tracer{tracer: tp.Tracer("github.com/agent-sandbox/agent-sandbox/internal/telemetry")}, tp
}

// TraceIDFor is the trace ID of the call with this request ID: the first 16 bytes of
// SHA-256("agent-sandbox/" + requestID).
func TraceIDFor(requestID string) trace.TraceID {
	sum := sha256.Sum256([]byte("agent-sandbox/" + requestID))
	var id trace.TraceID
	copy(id[:], sum[:16])
	return id
}

// traceIDKey carries the trace ID a root span must take to the ID generator.
type traceIDKey struct{}

// requestIDs gives a root span the trace ID its context carries (TraceIDFor of the request ID), and every
// span a random span ID.
type requestIDs struct{}

func (requestIDs) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	id, ok := ctx.Value(traceIDKey{}).(trace.TraceID)
	if !ok || !id.IsValid() {
		_, _ = rand.Read(id[:])
	}
	return id, randomSpanID()
}

func (requestIDs) NewSpanID(context.Context, trace.TraceID) trace.SpanID { return randomSpanID() }

func randomSpanID() trace.SpanID {
	var id trace.SpanID
	for !id.IsValid() {
		binary.BigEndian.PutUint64(id[:], randUint64())
	}
	return id
}

func randUint64() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.BigEndian.Uint64(b[:])
}

// Call is the trace of one tool call: its root span. A nil *Call records nothing.
type Call struct {
	ctx       context.Context
	span      trace.Span
	requestID string
}

// StartCall starts the root span "tools/call <tool>" of the call with this request ID, at start.
func (t *Tracer) StartCall(ctx context.Context, requestID, tool string, start time.Time) *Call {
	if t == nil {
		return nil
	}
	ctx = context.WithValue(ctx, traceIDKey{}, TraceIDFor(requestID))
	ctx, span := t.tracer.Start(ctx, "tools/call "+tool, trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindServer),
		trace.WithTimestamp(start),
		trace.WithAttributes(attribute.String(AttrRequestID, requestID), attribute.String("agent_sandbox.tool", tool)))
	return &Call{ctx: ctx, span: span, requestID: requestID}
}

// Set sets attributes agent_sandbox.<key> on the root span. Values are strings, bools and integers;
// other types are ignored (so that no structure whose content is unknown reaches the exporter).
func (c *Call) Set(attrs map[string]any) {
	if c == nil {
		return
	}
	c.span.SetAttributes(toAttributes(attrs)...)
}

// Event is a point in time within a span.
type Event struct {
	Name  string
	Time  time.Time
	Attrs map[string]any
}

// Event records an event on the root span.
func (c *Call) Event(e Event) {
	if c == nil {
		return
	}
	c.span.AddEvent(e.Name, trace.WithTimestamp(e.Time), trace.WithAttributes(toAttributes(e.Attrs)...))
}

// Phase records a finished phase of the call as a child span from start to end, with its events.
func (c *Call) Phase(name string, start, end time.Time, attrs map[string]any, events ...Event) {
	if c == nil {
		return
	}
	if end.Before(start) {
		end = start
	}
	_, span := c.span.TracerProvider().Tracer("github.com/agent-sandbox/agent-sandbox/internal/telemetry").Start(c.ctx, name,
		trace.WithTimestamp(start), trace.WithAttributes(attribute.String(AttrRequestID, c.requestID)),
		trace.WithAttributes(toAttributes(attrs)...))
	for _, e := range events {
		span.AddEvent(e.Name, trace.WithTimestamp(e.Time), trace.WithAttributes(toAttributes(e.Attrs)...))
	}
	span.End(trace.WithTimestamp(end))
}

// End ends the call at end with its outcome; a non-empty failure is the span's error status (one line,
// scrubbed by the caller).
func (c *Call) End(outcome, failure string, end time.Time) {
	if c == nil {
		return
	}
	c.span.SetAttributes(attribute.String("agent_sandbox.outcome", outcome))
	if failure != "" {
		c.span.SetStatus(codes.Error, scrub.String(failure))
	}
	c.span.End(trace.WithTimestamp(end))
}

// toAttributes maps our keys to agent_sandbox.<key> attributes, keeping strings, bools and numbers. The
// callers copy only fields that are not secrets; everything still passes through package scrub, so that a
// value of a secret's key or shape never leaves the process in a span.
func toAttributes(m map[string]any) []attribute.KeyValue {
	if len(m) == 0 {
		return nil
	}
	clean, _ := scrub.Value(m).(map[string]any)
	out := make([]attribute.KeyValue, 0, len(clean))
	for k, v := range clean {
		key := "agent_sandbox." + k
		switch v := v.(type) {
		case string:
			out = append(out, attribute.String(key, v))
		case bool:
			out = append(out, attribute.Bool(key, v))
		case int:
			out = append(out, attribute.Int(key, v))
		case int32:
			out = append(out, attribute.Int64(key, int64(v)))
		case int64:
			out = append(out, attribute.Int64(key, v))
		case float64:
			out = append(out, attribute.Float64(key, v))
		}
	}
	return out
}

var _ sdktrace.IDGenerator = requestIDs{}
