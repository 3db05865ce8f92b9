package webhook

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the webhook's Prometheus series, registered on the manager's registry.
type Metrics struct {
	decisions        *prometheus.CounterVec
	latency          *prometheus.HistogramVec
	approvals        *prometheus.CounterVec
	injections       prometheus.Counter
	cachedRenderings prometheus.Counter
	reloads          *prometheus.CounterVec
	policyInfo       *prometheus.GaugeVec
	warm             *prometheus.GaugeVec
}

// NewMetrics creates the series and registers them on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agent_sandbox_admission_decisions_total",
			Help: "Admission decisions on sandbox objects, by kind, operation, decision and the rule that denied.",
		}, []string{"kind", "operation", "decision", "rule"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "agent_sandbox_admission_duration_seconds",
			Help:    "Time to decide on one sandbox Job or Pod.",
			Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25},
		}, []string{"kind"}),
		approvals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agent_sandbox_approvals_total",
			Help: "Approval tokens accepted at admission: consumed (recorded in the ledger) or checked for a dry run.",
		}, []string{"result"}),
		cachedRenderings: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agent_sandbox_admission_cached_renderings_total",
			Help: "Sandbox Jobs admitted whose policy rendering was reused from the webhook's cache (the decision is the same either way).",
		}),
		injections: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agent_sandbox_credential_agent_injections_total",
			Help: "Sandbox Jobs into which the credential agent was injected.",
		}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agent_sandbox_config_reloads_total",
			Help: "Reloads of the policy and approver keys, by source and result (a failed reload keeps the last good one).",
		}, []string{"source", "result"}),
		policyInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "agent_sandbox_policy_info",
			Help: "The policy in force (value 1), by name and version.",
		}, []string{"name", "version"}),
		warm: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "agent_sandbox_warm_pods",
			Help: "Warm Pods of each tool's pool by state: idle (ready to claim), starting, claimed (serving a call).",
		}, []string{"tool", "state"}),
	}
	for _, c := range []prometheus.Collector{m.decisions, m.latency, m.approvals, m.injections, m.cachedRenderings, m.reloads, m.policyInfo, m.warm} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
