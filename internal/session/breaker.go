package session

import (
	"slices"
	"time"
)

// BreakerState is the state of a session's compaction circuit breaker.
type BreakerState string

// Breaker states. A missing breaker is closed with no failures.
const (
	BreakerClosed BreakerState = "closed"
	BreakerOpen   BreakerState = "open"
)

// Breaker is a session's circuit breaker: consecutive failed compactions,
// and whether the breaker has opened.
type Breaker struct {
	SessionID string       `json:"session_id"`
	State     BreakerState `json:"state"`
	Failures  int          `json:"failures"`
	LastError string       `json:"last_error,omitempty"`
	OpenedAt  *time.Time   `json:"opened_at,omitempty"`
	// ProbeAt is when the last half-open probe was let through (with a
	// breaker cooldown configured).
	ProbeAt   *time.Time `json:"probe_at,omitempty"`
	UpdatedAt time.Time  `json:"updated_at,omitzero"` // absent for a breaker never written
	// FailedRequests are the ids of the requests counted in Failures
	// (the latest MaxTrackedRequests): a request's redeliveries count once.
	FailedRequests []string `json:"failed_requests,omitempty"`
	// OpenedBy is the request whose failure opened the breaker.
	OpenedBy string `json:"opened_by,omitempty"`
	// OutageAt is when the last retryable failure (the model unavailable)
	// was counted: another within the failure's window is the same outage.
	OutageAt *time.Time `json:"outage_at,omitempty"`
	// Revision is the store's revision, for compare-and-set.
	Revision uint64 `json:"-"`
}

// Open reports whether the breaker is open.
func (b Breaker) Open() bool { return b.State == BreakerOpen }

// ProbeDue reports whether an open breaker may let a half-open probe
// through at now: cooldown has passed since it opened and since its last
// probe. Every breaker store applies this one rule.
func (b Breaker) ProbeDue(cooldown time.Duration, now time.Time) bool {
	if !b.Open() || cooldown <= 0 {
		return false
	}
	last := b.OpenedAt
	if b.ProbeAt != nil && (last == nil || b.ProbeAt.After(*last)) {
		last = b.ProbeAt
	}
	return last == nil || !now.Before(last.Add(cooldown))
}

// MaxTrackedRequests bounds Breaker.FailedRequests.
const MaxTrackedRequests = 16

// Counted reports whether the failure of request id is already counted.
func (b Breaker) Counted(id string) bool {
	return id != "" && slices.Contains(b.FailedRequests, id)
}

// Failure is one failed compaction, as a breaker counts it.
type Failure struct {
	// RequestID names the request: its redeliveries count once.
	RequestID string
	// Error is kept as the breaker's last error ("reason: error").
	Error string
	// Retryable marks a failure of the model's availability
	// (summary_failed after the provider's retries): runtimes retry it, and
	// all of one outage count once (see Window).
	Retryable bool
	// MaxFailures counted failures open the breaker.
	MaxFailures int
	// Window: a retryable failure within Window of the last counted one is
	// not counted again (0: each counts).
	Window time.Duration
}

// Fail counts f at now, unless its request is counted already or it is a
// retryable failure of an outage counted already (within f.Window of the
// last), and opens the breaker at f.MaxFailures. It reports whether it
// counted, and whether this failure opened the breaker. Every breaker store
// applies this one rule.
func (b *Breaker) Fail(f Failure, now time.Time) (counted, opened bool) {
	if b.Counted(f.RequestID) {
		return false, false
	}
	if f.Retryable && f.Window > 0 && b.OutageAt != nil && now.Before(b.OutageAt.Add(f.Window)) {
		return false, false
	}
	b.Failures++
	b.LastError = f.Error
	b.UpdatedAt = now.UTC()
	if f.Retryable {
		t := now.UTC()
		b.OutageAt = &t
	}
	if id := f.RequestID; id != "" {
		b.FailedRequests = append(b.FailedRequests, id)
		if n := len(b.FailedRequests); n > MaxTrackedRequests {
			b.FailedRequests = slices.Clone(b.FailedRequests[n-MaxTrackedRequests:])
		}
	}
	if !b.Open() && b.Failures >= f.MaxFailures {
		t := now.UTC()
		b.State, b.OpenedAt, b.OpenedBy = BreakerOpen, &t, f.RequestID
		return true, true
	}
	return true, false
}
