// Package events owns the CloudEvents of the public contract: their types,
// subjects and data (SPEC §8), built from pipeline results.
package events

import (
	"time"

	"github.com/compactor/compactor/internal/pipeline"
)

// Failed is the data of a CompactionFailed event; every field is always
// present.
type Failed struct {
	SessionID string `json:"session_id"`
	RequestID string `json:"request_id"`
	Trigger   string `json:"trigger"`
	Reason    string `json:"reason"`
	Error     string `json:"error"`
	Failures  int    `json:"failures"`
	Retryable bool   `json:"retryable"`
	// Quota and RetryAfterMS, on a quota_exceeded failure, name the
	// tenant's quota and when it has room again.
	Quota        string `json:"quota,omitempty"`
	RetryAfterMS int64  `json:"retry_after_ms,omitempty"`
	// What the failed attempt spent on the summary model (a failure after
	// summarising, such as insufficient_progress, still cost tokens).
	LLMCalls     int   `json:"llm_calls"`
	InputTokens  int   `json:"summary_input_tokens"`
	OutputTokens int   `json:"summary_output_tokens"`
	DurationMS   int64 `json:"duration_ms"`
}

// CircuitOpened is the data of a CompactionCircuitOpened event.
type CircuitOpened struct {
	SessionID string    `json:"session_id"`
	Failures  int       `json:"failures"`
	LastError string    `json:"last_error"`
	OpenedAt  time.Time `json:"opened_at"`
}

// CircuitClosed is the data of a CompactionCircuitClosed event: by an
// operator's reset or a successful half-open probe.
type CircuitClosed struct {
	SessionID string    `json:"session_id"`
	Failures  int       `json:"failures"`
	ClosedAt  time.Time `json:"closed_at"`
	By        string    `json:"by"` // "operator" or "probe"
}

// FailedData returns the CompactionFailed data of a failed result.
func FailedData(r *pipeline.Result) Failed {
	return Failed{SessionID: r.SessionID, RequestID: r.RequestID, Trigger: string(r.Trigger), Reason: string(r.Reason),
		Error: r.Error, Failures: r.Failures, Retryable: r.Retryable, LLMCalls: r.LLMCalls, InputTokens: r.InputTokens,
		OutputTokens: r.OutputTokens, DurationMS: r.DurationMS, Quota: r.Quota, RetryAfterMS: r.RetryAfterMS}
}

// CircuitOpenedData returns the CompactionCircuitOpened data of the result
// that opened a breaker (r.CircuitOpened with r.Breaker set).
func CircuitOpenedData(r *pipeline.Result) CircuitOpened {
	d := CircuitOpened{SessionID: r.SessionID, Failures: r.Failures, LastError: r.Error}
	if b := r.Breaker; b != nil {
		d.Failures, d.LastError = b.Failures, b.LastError
		if b.OpenedAt != nil {
			d.OpenedAt = *b.OpenedAt
		}
	}
	return d
}
