package pipeline

import (
	"errors"
	"fmt"
)

// Sentinel errors. Compact returns them wrapped in an *Error that carries the
// failure Reason; test with errors.Is.
var (
	// ErrInvalidConfig is returned by Config.Validate and New for settings
	// out of range.
	ErrInvalidConfig = errors.New("invalid compaction config")
	// ErrInvalidRequest is returned for a request without a session id, with
	// an unknown trigger or with a negative limit.
	ErrInvalidRequest = errors.New("invalid compaction request")
	// ErrSessionNotFound is returned when the store has no such session.
	ErrSessionNotFound = errors.New("session not found")
	// ErrCircuitOpen is returned, without calling a model, while the
	// session's breaker is open.
	ErrCircuitOpen = errors.New("compaction circuit open")
	// ErrSummaryFailed is returned when the summary model failed after its
	// retry budget, or kept answering with something that is not a summary.
	ErrSummaryFailed = errors.New("summary failed")
	// ErrPersistFailed is returned when the store could not save the
	// compaction.
	ErrPersistFailed = errors.New("persist failed")
	// ErrInsufficientProgress is returned when the best compaction possible
	// would leave the context over its limit, or remove less than
	// MinReduction of its tokens: failing beats a compaction loop.
	ErrInsufficientProgress = errors.New("compaction cannot make enough progress")
	// ErrConfiguration is returned when the settings alone make a
	// compaction impossible, whatever the session holds: the pinned
	// messages leave no room for a summary in the context limit, or the
	// ladder has no step that could fit it. It does not count against the
	// session's breaker (the model is not at fault); changing the settings
	// (the limit, the pinned messages, the ladder) fixes it.
	ErrConfiguration = errors.New("the settings allow no compaction")
	// ErrInvariant is returned when the context a compaction would produce
	// breaks an invariant (a tool call without its result, a pinned message
	// missing, a summary over budget); nothing is committed.
	ErrInvariant = errors.New("compaction would break a context invariant")
	// ErrCorruptSession is returned when the stored session does not
	// decode.
	ErrCorruptSession = errors.New("corrupt session")
	// ErrContextLength is what a Summarizer returns (wrapped) when the
	// prompt is over the summary model's input limit. The pipeline then
	// re-chunks smaller instead of failing.
	ErrContextLength = errors.New("summary model context length exceeded")
)

// Reason is the machine-readable failure reason of a CompactionFailed event.
type Reason string

// Failure reasons (SPEC §3, plus the guards of §9).
const (
	ReasonSummaryFailed        Reason = "summary_failed"
	ReasonPersistFailed        Reason = "persist_failed"
	ReasonCircuitOpen          Reason = "circuit_open"
	ReasonSessionNotFound      Reason = "session_not_found"
	ReasonInvalidRequest       Reason = "invalid_request"
	ReasonInsufficientProgress Reason = "insufficient_progress"
	ReasonInvariantViolated    Reason = "invariant_violated"
	// ReasonConfiguration: the settings alone allow no compaction
	// (ErrConfiguration); not retryable, and no breaker failure.
	ReasonConfiguration Reason = "configuration_error"
	// ReasonCorruptSession: the stored session (or its breaker) does not
	// decode; no retry can fix it, an operator must (or delete it).
	ReasonCorruptSession Reason = "corrupt_session"
	// ReasonQuotaExceeded: the session's tenant is over a quota of its
	// model use (a *tenant.QuotaError names it and when it has room
	// again); not retried, and no breaker failure.
	ReasonQuotaExceeded Reason = "quota_exceeded"
)

// Error is a failed compaction: the reason, whether retrying the same request
// later may succeed, and the cause.
type Error struct {
	Reason    Reason
	Retryable bool
	Err       error
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %v", e.Reason, e.Err) }

// Unwrap returns the cause, so errors.Is finds the sentinels.
func (e *Error) Unwrap() error { return e.Err }

// countsAsFailure reports whether a failure of this reason moves the
// session's breaker. Infrastructure failures (storage) and refusals (an open
// circuit, a bad request) do not: they say nothing about the session.
func (r Reason) countsAsFailure() bool {
	switch r {
	case ReasonSummaryFailed, ReasonInsufficientProgress, ReasonInvariantViolated:
		return true
	}
	return false
}

func fail(reason Reason, retryable bool, sentinel error, format string, args ...any) *Error {
	return &Error{Reason: reason, Retryable: retryable, Err: fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))}
}

// ContextLengthError is a Summarizer's ErrContextLength with the limit the
// provider reported, when it did (zero otherwise).
type ContextLengthError struct {
	Limit   int
	Message string
}

func (e *ContextLengthError) Error() string {
	if e.Limit > 0 {
		return fmt.Sprintf("summary model context length exceeded (limit %d): %s", e.Limit, e.Message)
	}
	return "summary model context length exceeded: " + e.Message
}

// Is makes errors.Is(err, ErrContextLength) true.
func (e *ContextLengthError) Is(target error) bool { return target == ErrContextLength }
