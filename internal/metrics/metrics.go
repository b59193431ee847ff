// Package metrics exposes the service's work to Prometheus: what the result
// events say one by one (outcomes, failures, tokens, model calls, time),
// here in aggregate, plus the consumer's delivery counters.
package metrics

import (
	"net/http"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/compactor/compactor/internal/consumer"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/preparer"
	"github.com/compactor/compactor/internal/router"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tenant"
)

const ns = "compactor"

// Metrics holds the service's collectors on their own registry. It is safe
// for concurrent use.
type Metrics struct {
	reg         *prometheus.Registry
	completed   *prometheus.CounterVec
	failed      *prometheus.CounterVec
	opened      prometheus.Counter
	duration    *prometheus.HistogramVec
	tokensIn    prometheus.Counter
	tokensOut   prometheus.Counter
	summarised  prometheus.Counter
	summaryIn   prometheus.Counter
	summaryOut  prometheus.Counter
	llmCalls    prometheus.Counter
	summaryToks prometheus.Histogram
	prepared    *prometheus.CounterVec
	// Per tenant (the default tenant is "_"): what each tenant's requests
	// did and cost.
	tenantRequests *prometheus.CounterVec
	tenantCalls    *prometheus.CounterVec
	tenantIn       *prometheus.CounterVec
	tenantOut      *prometheus.CounterVec
	// Model calls (each provider call, retries included), by provider,
	// model asked for, outcome and purpose.
	modelCalls    *prometheus.CounterVec
	modelDuration *prometheus.HistogramVec
	// hedges are the second calls of attempts whose first ran long.
	hedges *prometheus.CounterVec
	// The micro endpoints' answers, by endpoint and code, and their time.
	endpointAnswers  *prometheus.CounterVec
	endpointDuration *prometheus.HistogramVec
}

// New registers the collectors. version is the service's, reported as
// compactor_build_info; stats, when not nil, is read at every scrape for
// the consumer's delivery counters.
func New(version string, stats func() consumer.Stats) *Metrics {
	reg := prometheus.NewRegistry()
	f := func(c prometheus.Collector) { reg.MustRegister(c) }
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "build_info",
		Help: "Always 1; its labels say which build runs."}, []string{"version", "goversion"})
	info.WithLabelValues(version, runtime.Version()).Set(1)
	f(info)
	m := &Metrics{
		reg: reg,
		completed: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "requests_completed_total",
			Help: "Requests answered with CompactionCompleted, by outcome and trigger."}, []string{"outcome", "trigger"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "requests_failed_total",
			Help: "Failed attempts at requests, by reason and whether a retry may pass (summary_failed is answered at once; a storage failure is redelivered, and only its last delivery answers CompactionFailed)."}, []string{"reason", "retryable"}),
		opened: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "circuits_opened_total",
			Help: "Session breakers opened (one CompactionCircuitOpened each)."}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "request_duration_seconds",
			Help:    "Time to answer one request, model calls included, by outcome (failed for failures).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}}, []string{"outcome"}),
		tokensIn: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "context_tokens_before_total",
			Help: "Context tokens before compaction, summed over compactions."}),
		tokensOut: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "context_tokens_after_total",
			Help: "Context tokens after compaction, summed over compactions."}),
		summarised: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "messages_summarised_total",
			Help: "Messages folded into summaries."}),
		summaryIn: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "summary_input_tokens_total",
			Help: "Input tokens sent to summary models (provider usage where reported)."}),
		summaryOut: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "summary_output_tokens_total",
			Help: "Output tokens written by summary models."}),
		llmCalls: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "summary_calls_total",
			Help: "Calls to summary models."}),
		summaryToks: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "summary_tokens",
			Help: "Tokens of the summary in force after a compaction.", Buckets: prometheus.ExponentialBuckets(64, 2, 8)}),
		tenantRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "tenant_requests_total",
			Help: "Requests answered, by tenant and outcome (failed for a failure)."}, []string{"tenant", "outcome"}),
		tenantCalls: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "tenant_summary_calls_total",
			Help: "Calls to summary models, by tenant."}, []string{"tenant"}),
		tenantIn: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "tenant_summary_input_tokens_total",
			Help: "Input tokens sent to summary models, by tenant."}, []string{"tenant"}),
		tenantOut: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "tenant_summary_output_tokens_total",
			Help: "Output tokens written by summary models, by tenant."}, []string{"tenant"}),
		modelCalls: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "model_calls_total",
			Help: "Calls to summary model providers, each retry a call, by provider, model asked for, outcome (ok, context_length, rate_limited, server_error, unreachable, auth, bad_request, cancelled, error) and purpose (request or preparation)."},
			[]string{"provider", "model", "outcome", "purpose"}),
		modelDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "model_call_duration_seconds",
			Help:    "Time of one call to a summary model provider, by provider, model asked for, outcome and purpose.",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 20, 30, 60, 120}}, []string{"provider", "model", "outcome", "purpose"}),
		hedges: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "model_calls_hedged_total",
			Help: "Second calls made beside a request's call that ran past three times the provider's p95 (counted in model_calls_total too), by provider, model and outcome (ok: it answered first; cancelled: the first answered)."},
			[]string{"provider", "model", "outcome"}),
		endpointAnswers: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "endpoint_requests_total",
			Help: "Requests the micro endpoints answered (compactor.compact, compactor.session.*, compactor.breaker.*, compactor.result.get), by endpoint and code (ok, or the error code: 400, 404, 409, 413, 429, 503, 507, 500...)."},
			[]string{"endpoint", "code"}),
		endpointDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "endpoint_request_duration_seconds",
			Help:    "Time from an endpoint request's arrival to its answer, by endpoint.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}}, []string{"endpoint"}),
		prepared: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "preparation_runs_total",
			Help: "Preparation runs by outcome: prepared, unchanged, not_due, in_flight, no_model_needed, nothing_to_prepare, failed, cancelled."}, []string{"outcome"}),
	}
	for _, c := range []prometheus.Collector{m.completed, m.failed, m.opened, m.duration, m.tokensIn, m.tokensOut,
		m.summarised, m.summaryIn, m.summaryOut, m.llmCalls, m.summaryToks,
		m.tenantRequests, m.tenantCalls, m.tenantIn, m.tenantOut, m.modelCalls, m.modelDuration, m.hedges, m.endpointAnswers, m.endpointDuration,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		f(c)
	}
	if stats != nil {
		registerStats(f, stats)
	}
	return m
}

// registerStats exports the durable consumer's counters (stats).
func registerStats(f func(prometheus.Collector), stats func() consumer.Stats) {
	for _, d := range []struct {
		name, help string
		get        func(consumer.Stats) int64
		gauge      bool
	}{
		{"deliveries_received_total", "Request deliveries pulled from AGENT_CONTEXT.", func(s consumer.Stats) int64 { return s.Received }, false},
		{"deliveries_retried_total", "Deliveries handed back with a delay after a transient failure.", func(s consumer.Stats) int64 { return s.Retried }, false},
		{"deliveries_released_total", "Deliveries handed back at shutdown for another replica.", func(s consumer.Stats) int64 { return s.Released }, false},
		{"compactions_in_flight", "Requests being worked on now.", func(s consumer.Stats) int64 { return s.InFlight }, true},
	} {
		get := d.get
		val := func() float64 { return float64(get(stats())) }
		if d.gauge {
			f(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: d.name, Help: d.help}, val))
		} else {
			f(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: ns, Name: d.name, Help: d.help}, val))
		}
	}
	f(deadLetters{stats: stats, desc: prometheus.NewDesc(ns+"_deliveries_dead_lettered_total",
		"Requests copied to COMPACTION_DLQ and terminated, by reason: invalid_request, corrupt_session or max_deliveries.", []string{"reason"}, nil)})
}

// StoreFull exports compactor_store_full: 1 while the session store
// refuses writes for want of room, 0 otherwise.
func (m *Metrics) StoreFull(full func() bool) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "store_full",
		Help: "1 while the session store refuses writes for want of room (the server at max_file_store, a stream at its byte limit): delete sessions or raise the store."},
		func() float64 {
			if full() {
				return 1
			}
			return 0
		}))
}

// TenantUsage exports what the store holds per tenant, as usage last
// scanned it: compactor_tenant_sessions, compactor_tenant_bytes_stored and
// when the scan started.
func (m *Metrics) TenantUsage(usage func() (time.Time, map[string]session.TenantUsage)) {
	m.reg.MustRegister(tenantUsage{usage: usage,
		sessions: prometheus.NewDesc(ns+"_tenant_sessions", "Sessions stored, by tenant (as of the last usage scan).", []string{"tenant"}, nil),
		bytes: prometheus.NewDesc(ns+"_tenant_bytes_stored", "What the stored sessions' messages say, in bytes, by tenant (as of the last usage scan): the bytes_stored quota's count.",
			[]string{"tenant"}, nil),
		at: prometheus.NewDesc(ns+"_tenant_usage_scanned_timestamp_seconds", "When the last per-tenant usage scan started.", nil, nil)})
}

type tenantUsage struct {
	usage               func() (time.Time, map[string]session.TenantUsage)
	sessions, bytes, at *prometheus.Desc
}

func (u tenantUsage) Describe(ch chan<- *prometheus.Desc) {
	ch <- u.sessions
	ch <- u.bytes
	ch <- u.at
}

func (u tenantUsage) Collect(ch chan<- prometheus.Metric) {
	at, by := u.usage()
	if at.IsZero() {
		return
	}
	ch <- prometheus.MustNewConstMetric(u.at, prometheus.GaugeValue, float64(at.UnixNano())/1e9)
	for t, use := range by {
		ch <- prometheus.MustNewConstMetric(u.sessions, prometheus.GaugeValue, float64(use.Sessions), t)
		ch <- prometheus.MustNewConstMetric(u.bytes, prometheus.GaugeValue, float64(use.Bytes), t)
	}
}

// deadLetters reports the consumer's dead letters by reason at each
// scrape.
type deadLetters struct {
	stats func() consumer.Stats
	desc  *prometheus.Desc
}

func (d deadLetters) Describe(ch chan<- *prometheus.Desc) { ch <- d.desc }

func (d deadLetters) Collect(ch chan<- prometheus.Metric) {
	for reason, n := range d.stats().DeadLetteredBy {
		ch <- prometheus.MustNewConstMetric(d.desc, prometheus.CounterValue, float64(n), reason)
	}
}

// Observe counts one request's result.
func (m *Metrics) Observe(res *pipeline.Result) {
	secs := float64(res.DurationMS) / 1000
	if res.CircuitOpened {
		m.opened.Inc()
	}
	m.llmCalls.Add(float64(res.LLMCalls))
	m.summaryIn.Add(float64(res.InputTokens))
	m.summaryOut.Add(float64(res.OutputTokens))
	t := res.Tenant
	if t == "" {
		t = tenant.Default
	}
	m.tenantCalls.WithLabelValues(t).Add(float64(res.LLMCalls))
	m.tenantIn.WithLabelValues(t).Add(float64(res.InputTokens))
	m.tenantOut.WithLabelValues(t).Add(float64(res.OutputTokens))
	outcome := string(res.Outcome)
	if res.Failed {
		outcome = "failed"
	}
	m.tenantRequests.WithLabelValues(t, outcome).Inc()
	if res.Failed {
		retryable := "false"
		if res.Retryable {
			retryable = "true"
		}
		m.failed.WithLabelValues(string(res.Reason), retryable).Inc()
		m.duration.WithLabelValues("failed").Observe(secs)
		return
	}
	m.completed.WithLabelValues(string(res.Outcome), string(res.Trigger)).Inc()
	m.duration.WithLabelValues(string(res.Outcome)).Observe(secs)
	if res.Outcome == pipeline.OutcomeCompacted {
		m.tokensIn.Add(float64(res.TokensBefore))
		m.tokensOut.Add(float64(res.TokensAfter))
		m.summarised.Add(float64(res.MessagesSummarised))
		m.summaryToks.Observe(float64(res.SummaryTokens))
	}
}

// Preparations registers the preparation metrics: what the pipeline's
// preparations did (svc) and what the scheduler saw (sched); both are read
// at every scrape. ObservePreparation counts each preparation's outcome.
func (m *Metrics) Preparations(svc func() pipeline.PrepareStats, sched func() preparer.Stats) {
	for _, d := range []struct {
		name, help string
		get        func() int64
		gauge      bool
	}{
		{"preparations_started_total", "Preparations started (claimed): a compaction computed ahead of its request.", func() int64 { return svc().Started }, false},
		{"preparations_ready_total", "Preparations stored ready to commit.", func() int64 { return svc().Ready }, false},
		{"preparations_failed_total", "Preparations that failed (not counted against breakers; the request falls back to the blocking path).", func() int64 { return svc().Failed }, false},
		{"preparations_used_total", "Requests answered from a preparation with no model call (strategy prepared).", func() int64 { return svc().Used }, false},
		{"preparations_topped_up_total", "Requests answered from a preparation with only the messages since summarised (strategy prepared_topup).", func() int64 { return svc().TopUps }, false},
		{"preparations_stale_total", "Preparations never used: a compaction committed since, or replaced by one of another range.", func() int64 { return svc().Stale }, false},
		{"preparation_wasted_tokens_total", "Summary model tokens (input and output) spent on preparations never used: stale, replaced or failed.", func() int64 { return svc().WastedTokens }, false},
		{"preparation_triggers_total", "Appends and ContextNearBudget hints seen by the preparer.", func() int64 { return sched().Triggers }, false},
		{"preparation_triggers_dropped_total", "Triggers dropped because the preparation queue was full.", func() int64 { return sched().Dropped }, false},
		{"preparations_waiting", "Sessions waiting to be prepared.", func() int64 { return sched().Waiting }, true},
		{"preparation_triggers_paced_total", "Appends past prepare_at left alone because, at the session's pace, its limit was further off than a preparation takes to be ready.", func() int64 { return sched().Paced }, false},
	} {
		get := d.get
		val := func() float64 { return float64(get()) }
		if d.gauge {
			m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: d.name, Help: d.help}, val))
		} else {
			m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: ns, Name: d.name, Help: d.help}, val))
		}
	}
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "preparation_ready_seconds",
		Help: "How long a preparation takes from its trigger to ready, as the preparer has seen (a moving average; 0 before the first): what pacing plans by."},
		func() float64 { return float64(sched().ReadyMS) / 1000 }))
	m.reg.MustRegister(m.prepared)
}

// ObserveModelCall counts one provider call and its time (router.Observe).
func (m *Metrics) ObserveModelCall(c router.Call) {
	purpose := c.Purpose
	if purpose == "" {
		purpose = "request"
	}
	m.modelCalls.WithLabelValues(c.Provider, c.Model, c.Outcome, purpose).Inc()
	m.modelDuration.WithLabelValues(c.Provider, c.Model, c.Outcome, purpose).Observe(c.Duration.Seconds())
	if c.Hedged {
		m.hedges.WithLabelValues(c.Provider, c.Model, c.Outcome).Inc()
	}
}

// ObserveEndpoint counts one endpoint answer: its endpoint, its error code
// ("" for a success) and how long the request took.
func (m *Metrics) ObserveEndpoint(endpoint, code string, took time.Duration) {
	if code == "" {
		code = "ok"
	}
	m.endpointAnswers.WithLabelValues(endpoint, code).Inc()
	m.endpointDuration.WithLabelValues(endpoint).Observe(took.Seconds())
}

// ObservePreparation counts one preparation by its outcome.
func (m *Metrics) ObservePreparation(p pipeline.Preparation, _ error) {
	m.prepared.WithLabelValues(string(p.Outcome)).Inc()
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Registry returns the registry, for tests and extra collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }
