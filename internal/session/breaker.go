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
	UpdatedAt time.Time    `json:"updated_at"`
	// Revision is the store's revision, for compare-and-set.
	Revision uint64 `json:"-"`
}

// Open reports whether the breaker is open.
func (b Breaker) Open() bool { return b.State == BreakerOpen }
