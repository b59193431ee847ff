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

// Shared by two replicas, each allows half the rate and half the burst
// (at least one request).
func TestLimiterShare(t *testing.T) {
	l := NewLimiter()
	l.Set(map[string]Limits{"A": {RequestsPerSecond: 2, RequestsBurst: 4}, "B": {RequestsPerSecond: 0.5, RequestsBurst: 1}})
	l.SetShare(2)
	now := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	for i := range 2 {
		if err := l.Allow("A", now); err != nil {
			t.Fatalf("request %d of the shared burst: %v", i, err)
		}
	}
	var q *QuotaError
	if err := l.Allow("A", now); !errors.As(err, &q) || q.RetryAfter != time.Second || q.Limit != 2 {
		t.Fatalf("over the shared burst: %v (want a retry after 1 s, at the rate of 1 per second)", err)
	}
	if err := l.Allow("B", now); err != nil {
		t.Fatalf("a burst of 1 shared by two still allows one: %v", err)
	}
	l.SetShare(0)
	if l.Share() != 1 {
		t.Fatalf("share %d, want at least 1", l.Share())
	}
}
