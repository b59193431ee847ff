package session

import "time"

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
	UpdatedAt time.Time  `json:"updated_at"`
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
