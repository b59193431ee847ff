package gateway

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the gateway's Prometheus collectors.
type Metrics struct {
	requests    *prometheus.CounterVec
	addedTime   *prometheus.HistogramVec
	compactions *prometheus.CounterVec
	tokensSaved prometheus.Counter
}

// NewMetrics makes the collectors and registers them with reg (nil: none).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	const ns, sub = "compactor", "gateway"
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "requests_total",
			Help: "Calls served, by API and what went upstream: raw (the runtime's list), compacted, passthrough (nothing to keep), stateful (the upstream holds the conversation), legacy_functions (function_call without ids), behind, fail_open (the service unreachable), invalid, quota, overflow_retried."},
			[]string{"api", "upstream"}),
		addedTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "added_seconds",
			Help:    "Time from a call's arrival to its upstream request: what the gateway adds before the model sees it.",
			Buckets: []float64{.0005, .001, .002, .003, .005, .01, .015, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}}, []string{"api"}),
		compactions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "compactions_total",
			Help: "Compactions the gateway asked for, by outcome and strategy (prepared: served from a preparation)."},
			[]string{"outcome", "strategy"}),
		tokensSaved: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "tokens_saved_total",
			Help: "Tokens of the runtimes' lists not sent upstream (counted by the gateway's tokenizer)."}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.addedTime, m.compactions, m.tokensSaved)
	}
	return m
}

func (m *Metrics) request(api, upstream string) { m.requests.WithLabelValues(api, upstream).Inc() }

func (m *Metrics) added(api string, d time.Duration) {
	m.addedTime.WithLabelValues(api).Observe(d.Seconds())
}

func (m *Metrics) compaction(strategy, outcome string) {
	m.compactions.WithLabelValues(outcome, strategy).Inc()
}

func (m *Metrics) saved(n int) {
	if n > 0 {
		m.tokensSaved.Add(float64(n))
	}
}
