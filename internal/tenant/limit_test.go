package tenant

import (
	"errors"
	"testing"
	"time"
)

// A tenant's requests pass up to its burst, then one per 1/rate; another
// tenant's are not counted against it; a new limit applies at once.
func TestLimiter(t *testing.T) {
	l := NewLimiter()
	l.Set(map[string]Limits{"A": {RequestsPerSecond: 2, RequestsBurst: 3}})
	now := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	for i := range 3 {
		if err := l.Allow("A", now); err != nil {
			t.Fatalf("request %d of the burst: %v", i, err)
		}
	}
	err := l.Allow("A", now)
	var q *QuotaError
	if !errors.As(err, &q) || q.Quota != "requests_per_second" || q.RetryAfter != 500*time.Millisecond {
		t.Fatalf("over the burst: %v", err)
	}
	for i := range 100 { // B has no limit; the default tenant neither
		if l.Allow("B", now) != nil || l.Allow(Default, now) != nil {
			t.Fatalf("request %d of an unlimited tenant refused", i)
		}
	}
	if err := l.Allow("A", now.Add(500*time.Millisecond)); err != nil {
		t.Fatalf("after the retry time: %v", err)
	}
	if err := l.Allow("A", now.Add(500*time.Millisecond)); err == nil {
		t.Fatal("a second request in the same instant")
	}
	l.Set(map[string]Limits{"A": {RequestsPerSecond: 100}})
	if err := l.Allow("A", now.Add(500*time.Millisecond)); err != nil {
		t.Fatalf("after a raised limit: %v", err)
	}
}
