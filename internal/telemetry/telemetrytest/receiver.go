package telemetrytest

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Receiver is a real OTLP/HTTP trace receiver: it accepts POST /v1/traces with a protobuf
// ExportTraceServiceRequest, as a collector does, and keeps the spans.
type Receiver struct {
	// URL is the receiver's base URL (http://127.0.0.1:port), an --otlp-endpoint.
	URL string

	mu       sync.Mutex
	spans    []ReceivedSpan
	services []string
}

// ReceivedSpan is one span as it arrived.
type ReceivedSpan struct {
	Name    string
	TraceID string
	Parent  string
	Attrs   map[string]string
	// Events are the names of the span's events, in order.
	Events []string
}

// NewReceiver starts a receiver that stops when the test ends. A request that is not an OTLP/HTTP
// protobuf export fails the test.
func NewReceiver(t testing.TB) *Receiver {
	r := &Receiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
			t.Errorf("OTLP receiver got %s %s (%s)", req.Method, req.URL.Path, req.Header.Get("Content-Type"))
			http.Error(w, "unexpected", http.StatusBadRequest)
			return
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		msg := &coltracepb.ExportTraceServiceRequest{}
		if err := proto.Unmarshal(body, msg); err != nil {
			t.Errorf("OTLP receiver: decode export request: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.add(msg)
		b, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(b)
	}))
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

func (r *Receiver) add(msg *coltracepb.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range msg.ResourceSpans {
		for _, a := range rs.GetResource().GetAttributes() {
			if a.Key == "service.name" {
				r.services = append(r.services, a.GetValue().GetStringValue())
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				sp := ReceivedSpan{Name: s.Name, TraceID: hex.EncodeToString(s.TraceId), Parent: hex.EncodeToString(s.ParentSpanId), Attrs: map[string]string{}}
				for _, a := range s.Attributes {
					v := a.GetValue()
					switch {
					case v.GetStringValue() != "":
						sp.Attrs[a.Key] = v.GetStringValue()
					default:
						sp.Attrs[a.Key] = v.String()
					}
				}
				for _, e := range s.Events {
					sp.Events = append(sp.Events, e.Name)
				}
				r.spans = append(r.spans, sp)
			}
		}
	}
}

// Spans returns the spans received so far.
func (r *Receiver) Spans() []ReceivedSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]ReceivedSpan(nil), r.spans...)
}

// Services returns the service.name of each resource received.
func (r *Receiver) Services() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.services...)
}
