package tenant

import (
	"fmt"
	"math"
	"sync"
	"time"
)

// Limits are a tenant's quotas that a replica answers by itself.
type Limits struct {
	// RequestsPerSecond bounds the compaction requests a tenant makes
	// (request events and compactor.compact), with bursts of up to
	// RequestsBurst (default: one second's worth, at least 1); 0: no
	// bound. Each replica counts the requests it takes, so a deployment of
	// n replicas lets a tenant up to n times the rate.
	RequestsPerSecond float64 `json:"requests_per_second,omitempty"`
	RequestsBurst     int     `json:"requests_burst,omitempty"`
}

// QuotaError is a request over one of its tenant's quotas.
type QuotaError struct {
	Tenant     string
	Quota      string // the quota's name in the config, e.g. requests_per_second
	Limit      float64
	RetryAfter time.Duration // when the quota has room again
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("quota_exceeded: tenant %s is over its %s quota (%g): retry after %s", e.Tenant, e.Quota, e.Limit, e.RetryAfter.Round(time.Millisecond))
}

// Limiter answers each tenant's request-rate quota: a token bucket per
// tenant. It is safe for concurrent use; Set replaces the limits (the
// buckets of tenants whose limit did not change keep their tokens).
type Limiter struct {
	mu      sync.Mutex
	limits  map[string]Limits
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
	limit  Limits
}

// NewLimiter returns a limiter with no limits.
func NewLimiter() *Limiter {
	return &Limiter{limits: map[string]Limits{}, buckets: map[string]*bucket{}}
}

// Set replaces every tenant's limits.
func (l *Limiter) Set(limits map[string]Limits) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.limits = make(map[string]Limits, len(limits))
	for t, lim := range limits {
		l.limits[t] = lim
	}
	for t, b := range l.buckets {
		if l.limits[t] != b.limit {
			delete(l.buckets, t)
		}
	}
}

// Allow takes one request of tenant t at now, or answers the QuotaError
// that says when there is room again.
func (l *Limiter) Allow(t string, now time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	lim := l.limits[t]
	if lim.RequestsPerSecond <= 0 {
		return nil
	}
	burst := float64(lim.RequestsBurst)
	if burst <= 0 {
		burst = math.Max(1, math.Ceil(lim.RequestsPerSecond))
	}
	b := l.buckets[t]
	if b == nil {
		b = &bucket{tokens: burst, at: now, limit: lim}
		l.buckets[t] = b
	}
	b.tokens = math.Min(burst, b.tokens+now.Sub(b.at).Seconds()*lim.RequestsPerSecond)
	b.at = now
	if b.tokens >= 1 {
		b.tokens--
		return nil
	}
	wait := time.Duration((1 - b.tokens) / lim.RequestsPerSecond * float64(time.Second))
	return &QuotaError{Tenant: t, Quota: "requests_per_second", Limit: lim.RequestsPerSecond, RetryAfter: wait}
}
