package kvstore

import (
	"context"
	"math/rand/v2"
	"time"
)

// backoff waits a little before the next try of a compare-and-set lost
// to another writer (another process): a random wait up to 1 ms doubled
// with each try, at most 50 ms, so two writers that keep meeting drift
// apart. False when ctx ends first.
func backoff(ctx context.Context, attempt int) bool {
	ceiling := min(time.Millisecond<<min(attempt, 6), 50*time.Millisecond)
	t := time.NewTimer(rand.N(ceiling) + time.Millisecond/4)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
