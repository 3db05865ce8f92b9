package mcp

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agent-sandbox/agent-sandbox/internal/service"
)

// Outcomes of a tool call, the "outcome" label of the metrics: OutcomeOK, OutcomeApprovalRequired, a
// service.Kind ("denied", "invalid", "failed", "approval", "rate_limited"), or OutcomeError for anything else (a
// cancelled call, say).
const (
	OutcomeOK               = "ok"
	OutcomeApprovalRequired = "approval_required"
	OutcomeError            = "error"
)

// Metrics are the MCP server's Prometheus series: tool calls by tool and outcome, their durations, and
// the calls in progress.
type Metrics struct {
	calls    *prometheus.CounterVec
	duration *prometheus.HistogramVec
	inFlight *prometheus.GaugeVec
}

// NewMetrics creates the series and registers them on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agent_sandbox_mcp_tool_calls_total",
			Help: "MCP tool calls that ended, by tool and outcome (ok, approval_required, denied, invalid, failed, approval, error).",
		}, []string{"tool", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "agent_sandbox_mcp_tool_call_duration_seconds",
			Help: "Time from an MCP tool call to its result, sandbox start-up and the tool's run included, by tool and outcome.",
			// A refusal takes milliseconds; a sandbox call seconds; a Terraform run up to the Job deadline.
			Buckets: []float64{0.01, 0.05, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300, 600},
		}, []string{"tool", "outcome"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "agent_sandbox_mcp_tool_calls_in_flight",
			Help: "MCP tool calls in progress, by tool.",
		}, []string{"tool"}),
	}
	for _, c := range []prometheus.Collector{m.calls, m.duration, m.inFlight} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Instrument returns svc with every call counted and timed in m.
func Instrument(svc Service, m *Metrics) Service {
	return &instrumented{svc: svc, m: m, now: time.Now}
}

type instrumented struct {
	svc Service
	m   *Metrics
	now func() time.Time
}

var _ Service = (*instrumented)(nil)

// observe starts the clock for one call of tool; the returned function records its outcome.
func (s *instrumented) observe(tool string) func(outcome string) {
	start := s.now()
	g := s.m.inFlight.WithLabelValues(tool)
	g.Inc()
	return func(outcome string) {
		g.Dec()
		s.m.calls.WithLabelValues(tool, outcome).Inc()
		s.m.duration.WithLabelValues(tool, outcome).Observe(s.now().Sub(start).Seconds())
	}
}

// outcomeOf classifies a call's error; the label values are a fixed, small set.
func outcomeOf(err error) string {
	if err == nil {
		return OutcomeOK
	}
	var se *service.Error
	if errors.As(err, &se) {
		switch se.Kind {
		case service.KindDenied, service.KindInvalid, service.KindFailed, service.KindApproval, service.KindRateLimited:
			return string(se.Kind)
		case service.KindApprovalRequired:
			return OutcomeApprovalRequired
		}
	}
	return OutcomeError
}

// Tools is the service's catalogue, unchanged.
func (s *instrumented) Tools() ([]service.ToolInfo, error) { return s.svc.Tools() }

// Call counts and times one policy tool call. The tool label stays a small, fixed set: the server registers
// a handler only for the policy's tools, so no other name reaches here.
func (s *instrumented) Call(ctx context.Context, tool string, args map[string]any, p service.Progress) (any, error) {
	done := s.observe(tool)
	out, err := s.svc.Call(ctx, tool, args, p)
	outcome := outcomeOf(err)
	if a, ok := out.(*service.ApplyOutput); ok && err == nil && a.Status == service.StatusApprovalRequired {
		outcome = OutcomeApprovalRequired
	}
	done(outcome)
	return out, err
}

func (s *instrumented) ApprovalStatus(ctx context.Context, in service.ApprovalStatusInput) (*service.ApprovalStatusOutput, error) {
	done := s.observe(service.ToolApprovalStatus)
	out, err := s.svc.ApprovalStatus(ctx, in)
	done(outcomeOf(err))
	return out, err
}
