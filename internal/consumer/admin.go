package consumer

import (
	"context"

	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
)

// ResetBreaker closes a session's breaker and, when it was open, publishes
// CompactionCircuitClosed (by "operator"). It returns the breaker's state
// before the reset. Resetting a closed breaker changes and publishes
// nothing; resetting one opening twice publishes one event.
func ResetBreaker(ctx context.Context, svc *pipeline.Service, pub *Publisher, sessionID string) (session.Breaker, error) {
	prev, err := svc.ResetBreaker(ctx, sessionID)
	if err != nil {
		return prev, err
	}
	if prev.Open() {
		if err := pub.CircuitClosed(ctx, prev, "operator"); err != nil {
			return prev, err
		}
	}
	return prev, nil
}
