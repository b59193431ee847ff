package metrics_test

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/compactor/compactor/internal/consumer"
	"github.com/compactor/compactor/internal/metrics"
	"github.com/compactor/compactor/internal/pipeline"
)

func TestObserveAndScrape(t *testing.T) {
	m := metrics.New("1.2.3", func() consumer.Stats {
		return consumer.Stats{Received: 5, Retried: 2, DeadLettered: 1, DeadLetteredBy: map[string]int64{"invalid_request": 1}, InFlight: 3}
	})
	m.Observe(&pipeline.Result{Trigger: pipeline.TriggerOverBudget, Outcome: pipeline.OutcomeCompacted, TokensBefore: 9000, TokensAfter: 3000,
		MessagesSummarised: 40, SummaryTokens: 800, LLMCalls: 2, InputTokens: 7000, OutputTokens: 800, DurationMS: 120})
	m.Observe(&pipeline.Result{Trigger: pipeline.TriggerOverflow, Outcome: pipeline.OutcomeNoop, DurationMS: 3})
	m.Observe(&pipeline.Result{Failed: true, Reason: pipeline.ReasonSummaryFailed, Retryable: true, CircuitOpened: true, LLMCalls: 1, DurationMS: 50})
	m.Observe(&pipeline.Result{Tenant: "TENANT_A", Trigger: pipeline.TriggerOverBudget, Outcome: pipeline.OutcomeCompacted, LLMCalls: 4, InputTokens: 500, OutputTokens: 90})

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`compactor_requests_completed_total{outcome="compacted",trigger="over_budget"} 2`,
		`compactor_requests_completed_total{outcome="noop",trigger="overflow"} 1`,
		`compactor_requests_failed_total{reason="summary_failed",retryable="true"} 1`,
		"compactor_circuits_opened_total 1",
		"compactor_context_tokens_before_total 9000",
		"compactor_context_tokens_after_total 3000",
		"compactor_messages_summarised_total 40",
		"compactor_summary_calls_total 7",
		"compactor_summary_input_tokens_total 7500",
		`compactor_tenant_requests_total{outcome="compacted",tenant="_"} 1`,
		`compactor_tenant_requests_total{outcome="failed",tenant="_"} 1`,
		`compactor_tenant_requests_total{outcome="compacted",tenant="TENANT_A"} 1`,
		`compactor_tenant_summary_calls_total{tenant="TENANT_A"} 4`,
		`compactor_tenant_summary_calls_total{tenant="_"} 3`,
		`compactor_tenant_summary_input_tokens_total{tenant="TENANT_A"} 500`,
		`compactor_tenant_summary_output_tokens_total{tenant="TENANT_A"} 90`,
		`compactor_request_duration_seconds_count{outcome="failed"} 1`,
		"compactor_deliveries_received_total 5",
		"compactor_deliveries_retried_total 2",
		`compactor_deliveries_dead_lettered_total{reason="invalid_request"} 1`,
		`compactor_build_info{goversion="go`,
		`version="1.2.3"} 1`,
		"compactor_compactions_in_flight 3",
		"go_goroutines",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
}
